/// Apple's closed sets in signed data, typed. A payload keeps each value as Apple wrote it
/// (`rawType`...) and reads it through these (`type`...), as Apple's own library does: a value
/// Apple adds later is kept and shown, never a decoding failure, and reads as nil here.

/// `JWSTransaction.type`.
public enum SignedProductType: String, Sendable, CaseIterable {
    case autoRenewable = "Auto-Renewable Subscription"
    case nonConsumable = "Non-Consumable"
    case consumable = "Consumable"
    case nonRenewing = "Non-Renewing Subscription"
}

/// `inAppOwnershipType`: bought by this Apple ID, or shared with it by its family.
public enum InAppOwnershipType: String, Sendable, CaseIterable {
    case purchased = "PURCHASED"
    case familyShared = "FAMILY_SHARED"
}

/// `offerDiscountType`.
public enum OfferDiscountType: String, Sendable, CaseIterable {
    case freeTrial = "FREE_TRIAL"
    case payAsYouGo = "PAY_AS_YOU_GO"
    case payUpFront = "PAY_UP_FRONT"
}

/// `revocationType`: how a revoked transaction's money went (Apple added it in 2025).
public enum RevocationType: String, Sendable, CaseIterable {
    /// The whole price went back to the customer.
    case refundFull = "REFUND_FULL"
    /// `revocationPercentage` of the price went back.
    case refundProrated = "REFUND_PRORATED"
    /// The family organizer stopped sharing: no money moved.
    case familyRevoke = "FAMILY_REVOKE"
}

/// `transactionReason`: a customer's purchase, or the App Store's renewal.
public enum TransactionReason: String, Sendable, CaseIterable {
    case purchase = "PURCHASE"
    case renewal = "RENEWAL"
}

/// `autoRenewStatus` of a signed renewal info.
public enum AutoRenewStatus: Int, Sendable, CaseIterable {
    case off = 0
    case on = 1
}

/// `expirationIntent`: why a subscription expired.
public enum ExpirationIntent: Int, Sendable, CaseIterable {
    case customerCancelled = 1
    case billingError = 2
    case customerDidNotConsentToPriceIncrease = 3
    case productNotAvailable = 4
    case other = 5
}

/// `priceIncreaseStatus`: whether the customer answered a price increase that needs consent.
public enum PriceIncreaseStatus: Int, Sendable, CaseIterable {
    case customerHasNotResponded = 0
    case customerConsented = 1
}

/// `data.status` of a notification and of Get All Subscription Statuses.
public enum SubscriptionStatus: Int, Sendable, CaseIterable {
    case active = 1
    case expired = 2
    case billingRetry = 3
    case billingGracePeriod = 4
    case revoked = 5
}

/// `notificationType` of a Server Notification V2.
public enum NotificationTypeV2: String, Sendable, CaseIterable {
    case consumptionRequest = "CONSUMPTION_REQUEST"
    case didChangeRenewalPref = "DID_CHANGE_RENEWAL_PREF"
    case didChangeRenewalStatus = "DID_CHANGE_RENEWAL_STATUS"
    case didFailToRenew = "DID_FAIL_TO_RENEW"
    case didRenew = "DID_RENEW"
    case expired = "EXPIRED"
    case externalPurchaseToken = "EXTERNAL_PURCHASE_TOKEN"
    case gracePeriodExpired = "GRACE_PERIOD_EXPIRED"
    case metadataUpdate = "METADATA_UPDATE"
    case migration = "MIGRATION"
    case offerRedeemed = "OFFER_REDEEMED"
    case oneTimeCharge = "ONE_TIME_CHARGE"
    case priceChange = "PRICE_CHANGE"
    case priceIncrease = "PRICE_INCREASE"
    case refund = "REFUND"
    case refundDeclined = "REFUND_DECLINED"
    case refundReversed = "REFUND_REVERSED"
    case renewalExtended = "RENEWAL_EXTENDED"
    case renewalExtension = "RENEWAL_EXTENSION"
    case rescindConsent = "RESCIND_CONSENT"
    case revoke = "REVOKE"
    case subscribed = "SUBSCRIBED"
    case test = "TEST"
}

/// `subtype` of a Server Notification V2.
public enum NotificationSubtype: String, Sendable, CaseIterable {
    case accepted = "ACCEPTED"
    case autoRenewDisabled = "AUTO_RENEW_DISABLED"
    case autoRenewEnabled = "AUTO_RENEW_ENABLED"
    case billingRecovery = "BILLING_RECOVERY"
    case billingRetry = "BILLING_RETRY"
    case downgrade = "DOWNGRADE"
    case failure = "FAILURE"
    case gracePeriod = "GRACE_PERIOD"
    case initialBuy = "INITIAL_BUY"
    case pending = "PENDING"
    case priceIncrease = "PRICE_INCREASE"
    case productNotForSale = "PRODUCT_NOT_FOR_SALE"
    case resubscribe = "RESUBSCRIBE"
    case summary = "SUMMARY"
    case unreported = "UNREPORTED"
    case upgrade = "UPGRADE"
    case voluntary = "VOLUNTARY"
}
