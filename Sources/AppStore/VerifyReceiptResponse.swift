import Foundation

/// The body of Apple's verifyReceipt answer, named as Apple names it.
///
/// Decoding is tolerant in the ways real answers require (see `FlexibleDecoding.swift`); only
/// what the job reads is kept, and unknown fields are ignored. Unknown status codes are kept as
/// numbers, never rejected.
public struct VerifyReceiptResponse: Decodable, Sendable, Equatable {
    /// 0 valid; 21006 valid but the subscription expired (legacy); 21002/21005/21009 and
    /// 21100-21199 are Apple's trouble; 21003, 21004, 21010 are the receipt's or the secret's.
    public var status: Int
    /// `Production` or `Sandbox`.
    public var environment: String?
    /// The retry flag, spelled `is-retryable` or `is_retryable`.
    public var isRetryable: Bool?
    public var exception: String?
    public var receipt: Receipt?
    /// The freshest base64 receipt for the account (may be a placeholder such as `[[REDACTED]]`).
    public var latestReceipt: String?
    public var latestReceiptInfo: [Transaction]
    public var pendingRenewalInfo: [PendingRenewalInfo]

    public init(
        status: Int, environment: String? = nil, isRetryable: Bool? = nil, exception: String? = nil,
        receipt: Receipt? = nil, latestReceipt: String? = nil, latestReceiptInfo: [Transaction] = [],
        pendingRenewalInfo: [PendingRenewalInfo] = []
    ) {
        self.status = status
        self.environment = environment
        self.isRetryable = isRetryable
        self.exception = exception
        self.receipt = receipt
        self.latestReceipt = latestReceipt
        self.latestReceiptInfo = latestReceiptInfo
        self.pendingRenewalInfo = pendingRenewalInfo
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: AppleKey.self)
        guard let status = try container.flexibleInt("status") else {
            throw DecodingError.keyNotFound(AppleKey("status"), .init(codingPath: [], debugDescription: "no status"))
        }
        self.status = status
        environment = try container.flexibleString("environment")
        isRetryable = try container.flexibleBool("is-retryable") ?? container.flexibleBool("is_retryable")
        exception = try? container.flexibleString("exception")
        receipt = try container.decodeIfPresent(Receipt.self, forKey: AppleKey("receipt"))
        latestReceipt = try? container.flexibleString("latest_receipt")
        // Legacy (iOS 6 style) answers put one object under latest_(expired_)receipt_info.
        var latest = try container.flexibleArray("latest_receipt_info", of: Transaction.self)
        if latest.isEmpty {
            latest = try container.flexibleArray("latest_expired_receipt_info", of: Transaction.self)
        }
        latestReceiptInfo = latest
        pendingRenewalInfo = try container.flexibleArray("pending_renewal_info", of: PendingRenewalInfo.self)
    }

    /// Decodes an answer body; a UTF-8 byte order mark in front is skipped.
    public static func decode(_ body: some Collection<UInt8>) throws -> VerifyReceiptResponse {
        var bytes = Array(body)
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        return try JSONDecoder().decode(VerifyReceiptResponse.self, from: Data(bytes))
    }
}

/// The decoded receipt inside an answer (`receipt`).
public struct Receipt: Decodable, Sendable, Equatable {
    /// `Production`, `ProductionSandbox`, ...
    public var receiptType: String?
    public var bundleId: String?
    public var applicationVersion: String?
    public var originalApplicationVersion: String?
    public var receiptCreationDate: Date?
    public var requestDate: Date?
    public var originalPurchaseDate: Date?
    public var appItemId: String?
    public var inApp: [Transaction]

    public init(bundleId: String? = nil, inApp: [Transaction] = []) {
        self.bundleId = bundleId
        self.inApp = inApp
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: AppleKey.self)
        receiptType = try container.flexibleString("receipt_type")
        bundleId = try container.flexibleString("bundle_id") ?? container.flexibleString("bid")
        applicationVersion = try container.flexibleString("application_version") ?? container.flexibleString("bvrs")
        originalApplicationVersion = try container.flexibleString("original_application_version")
        receiptCreationDate = try container.appleDate("receipt_creation_date")
        requestDate = try container.appleDate("request_date")
        originalPurchaseDate = try container.appleDate("original_purchase_date")
        appItemId = try container.flexibleString("app_item_id")
        let inApp = try container.flexibleArray("in_app", of: Transaction.self)
        if inApp.isEmpty, try container.flexibleString("transaction_id") != nil {
            // A legacy answer's receipt is itself one transaction.
            self.inApp = [try Transaction(from: decoder)]
        } else {
            self.inApp = inApp
        }
    }
}

/// One entry of `latest_receipt_info` or `receipt.in_app`.
public struct Transaction: Decodable, Sendable, Equatable {
    public var transactionId: String
    public var originalTransactionId: String?
    public var productId: String
    public var quantity: Int?
    public var purchaseDate: Date?
    public var originalPurchaseDate: Date?
    public var expiresDate: Date?
    public var cancellationDate: Date?
    /// 1: the customer cancelled for an issue in the app; 0: another reason.
    public var cancellationReason: Int?
    public var isUpgraded: Bool?
    public var isTrialPeriod: Bool?
    public var isInIntroOfferPeriod: Bool?
    public var webOrderLineItemId: String?
    public var subscriptionGroupIdentifier: String?
    public var offerCodeRefName: String?
    public var promotionalOfferId: String?
    /// `PURCHASED` or `FAMILY_SHARED`.
    public var inAppOwnershipType: String?

    public init(
        transactionId: String, originalTransactionId: String? = nil, productId: String, quantity: Int? = 1,
        purchaseDate: Date? = nil, originalPurchaseDate: Date? = nil, expiresDate: Date? = nil,
        cancellationDate: Date? = nil, cancellationReason: Int? = nil, isUpgraded: Bool? = nil,
        isTrialPeriod: Bool? = nil, isInIntroOfferPeriod: Bool? = nil, webOrderLineItemId: String? = nil,
        subscriptionGroupIdentifier: String? = nil, offerCodeRefName: String? = nil,
        promotionalOfferId: String? = nil, inAppOwnershipType: String? = nil
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.quantity = quantity
        self.purchaseDate = purchaseDate
        self.originalPurchaseDate = originalPurchaseDate
        self.expiresDate = expiresDate
        self.cancellationDate = cancellationDate
        self.cancellationReason = cancellationReason
        self.isUpgraded = isUpgraded
        self.isTrialPeriod = isTrialPeriod
        self.isInIntroOfferPeriod = isInIntroOfferPeriod
        self.webOrderLineItemId = webOrderLineItemId
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.offerCodeRefName = offerCodeRefName
        self.promotionalOfferId = promotionalOfferId
        self.inAppOwnershipType = inAppOwnershipType
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: AppleKey.self)
        guard let transactionId = try container.flexibleString("transaction_id") else {
            throw DecodingError.keyNotFound(
                AppleKey("transaction_id"), .init(codingPath: container.codingPath, debugDescription: "a transaction without transaction_id"))
        }
        guard let productId = try container.flexibleString("product_id") else {
            throw DecodingError.keyNotFound(
                AppleKey("product_id"), .init(codingPath: container.codingPath, debugDescription: "a transaction without product_id"))
        }
        self.transactionId = transactionId
        self.productId = productId
        originalTransactionId = try container.flexibleString("original_transaction_id")
        quantity = try container.flexibleInt("quantity")
        purchaseDate = try container.appleDate("purchase_date")
        originalPurchaseDate = try container.appleDate("original_purchase_date")
        expiresDate = try container.appleDate("expires_date")
        cancellationDate = try container.appleDate("cancellation_date")
        cancellationReason = try container.flexibleInt("cancellation_reason")
        isUpgraded = try container.flexibleBool("is_upgraded")
        isTrialPeriod = try container.flexibleBool("is_trial_period")
        isInIntroOfferPeriod = try container.flexibleBool("is_in_intro_offer_period")
        webOrderLineItemId = try container.flexibleString("web_order_line_item_id")
        subscriptionGroupIdentifier = try container.flexibleString("subscription_group_identifier")
        offerCodeRefName = try container.flexibleString("offer_code_ref_name")
        promotionalOfferId = try container.flexibleString("promotional_offer_id")
        inAppOwnershipType = try container.flexibleString("in_app_ownership_type")
    }
}

/// One entry of `pending_renewal_info`: what happens at the next renewal of a chain.
public struct PendingRenewalInfo: Decodable, Sendable, Equatable {
    public var originalTransactionId: String?
    public var productId: String?
    public var autoRenewProductId: String?
    public var autoRenewStatus: Bool?
    /// 1 customer cancelled, 2 billing error, 3 price increase not consented, 4 product unavailable, 5 unknown.
    public var expirationIntent: Int?
    public var gracePeriodExpiresDate: Date?
    public var isInBillingRetryPeriod: Bool?
    public var priceConsentStatus: Int?

    public init(
        originalTransactionId: String? = nil, productId: String? = nil, autoRenewProductId: String? = nil,
        autoRenewStatus: Bool? = nil, expirationIntent: Int? = nil, gracePeriodExpiresDate: Date? = nil,
        isInBillingRetryPeriod: Bool? = nil, priceConsentStatus: Int? = nil
    ) {
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.autoRenewProductId = autoRenewProductId
        self.autoRenewStatus = autoRenewStatus
        self.expirationIntent = expirationIntent
        self.gracePeriodExpiresDate = gracePeriodExpiresDate
        self.isInBillingRetryPeriod = isInBillingRetryPeriod
        self.priceConsentStatus = priceConsentStatus
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: AppleKey.self)
        originalTransactionId = try container.flexibleString("original_transaction_id")
        productId = try container.flexibleString("product_id")
        autoRenewProductId = try container.flexibleString("auto_renew_product_id")
        autoRenewStatus = try container.flexibleBool("auto_renew_status")
        expirationIntent = try container.flexibleInt("expiration_intent")
        gracePeriodExpiresDate = try container.appleDate("grace_period_expires_date")
        isInBillingRetryPeriod = try container.flexibleBool("is_in_billing_retry_period")
        priceConsentStatus = try container.flexibleInt("price_consent_status")
    }
}
