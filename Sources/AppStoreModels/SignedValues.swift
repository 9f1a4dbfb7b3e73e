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

/// `transactionReason`: a customer's purchase, or the App Store's renewal.
public enum TransactionReason: String, Sendable, CaseIterable {
    case purchase = "PURCHASE"
    case renewal = "RENEWAL"
}
