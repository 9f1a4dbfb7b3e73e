import Foundation

/// The body of Apple's verifyReceipt answer, named as Apple names it.
///
/// Decoding is tolerant in the ways real answers require (see `FlexibleDecoding.swift`); only
/// what the job reads is kept, and unknown fields are ignored. Unknown status codes are kept as
/// numbers, never rejected.
public struct VerifyReceiptResponse: Sendable, Equatable {
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

    /// Decodes an answer body; a UTF-8 byte order mark in front is skipped.
    public static func decode(_ body: some Collection<UInt8>) throws -> VerifyReceiptResponse {
        try AppleJSONReader.read(body) { reader in try VerifyReceiptResponse(reading: &reader, lenient: false) }
    }

    /// Reads an answer object. `lenient` (a notification's `unified_receipt`, where status is a
    /// hint) defaults a missing status to 0 and ignores fields it cannot read instead of throwing.
    init(reading reader: inout AppleJSONReader, lenient: Bool) throws {
        var status: AppleJSONValue? = nil
        var environment: AppleJSONValue? = nil
        var retryable: AppleJSONValue? = nil
        var retryableUnderscore: AppleJSONValue? = nil
        var exception: AppleJSONValue? = nil
        var latestReceipt: AppleJSONValue? = nil
        var receipt: Receipt?
        var latest: [Transaction] = []
        var latestExpired: [Transaction] = []
        var pending: [PendingRenewalInfo] = []
        try reader.enterObject()
        while let key = try reader.nextMember() {
            if key == "status" {
                status = try reader.value()
            } else if key == "environment" {
                environment = try reader.value()
            } else if key == "is-retryable" {
                retryable = try reader.value()
            } else if key == "is_retryable" {
                retryableUnderscore = try reader.value()
            } else if key == "exception" {
                exception = try reader.value()
            } else if key == "latest_receipt" {
                latestReceipt = try reader.value()
            } else if key == "receipt", !lenient {
                if try reader.peek() == .null { try reader.skipValue() } else { receipt = try Receipt(reading: &reader) }
            } else if key == "latest_receipt_info" {
                latest = try reader.lenientIf(lenient, otherwise: []) { try $0.flexibleArray { try Transaction(reading: &$0) } }
            } else if key == "latest_expired_receipt_info", !lenient {
                latestExpired = try reader.flexibleArray { try Transaction(reading: &$0) }
            } else if key == "pending_renewal_info" {
                pending = try reader.lenientIf(lenient, otherwise: []) { try $0.flexibleArray { try PendingRenewalInfo(reading: &$0) } }
            } else {
                try reader.skipValue()
            }
        }
        if lenient {
            self.status = (try? status?.int("status")) ?? 0
            self.environment = try? environment?.string()
        } else {
            guard let status = try status?.int("status") else { throw AppleJSONError(description: "an answer without a status") }
            self.status = status
            self.environment = try environment?.string()
            isRetryable = try retryable?.bool() ?? retryableUnderscore?.bool()
            self.exception = try? exception?.string()
        }
        self.receipt = receipt
        self.latestReceipt = try? latestReceipt?.string()
        // Legacy (iOS 6 style) answers put one object under latest_(expired_)receipt_info.
        latestReceiptInfo = latest.isEmpty ? latestExpired : latest
        pendingRenewalInfo = pending
    }
}

/// The decoded receipt inside an answer (`receipt`).
public struct Receipt: Sendable, Equatable {
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

    init(reading reader: inout AppleJSONReader) throws {
        var receiptType: AppleJSONValue? = nil, bundleId: AppleJSONValue? = nil, bid: AppleJSONValue? = nil
        var applicationVersion: AppleJSONValue? = nil, bvrs: AppleJSONValue? = nil, originalApplicationVersion: AppleJSONValue? = nil
        var creationMs: AppleJSONValue? = nil, creation: AppleJSONValue? = nil, requestMs: AppleJSONValue? = nil
        var request: AppleJSONValue? = nil, appItemId: AppleJSONValue? = nil
        // A legacy receipt is itself a transaction; `original_purchase_date` belongs to both.
        var legacy = TransactionFields(of: reader)
        var inApp: [Transaction] = []
        try reader.enterObject()
        while let key = try reader.nextMember() {
            if key == "receipt_type" { receiptType = try reader.value() }
            else if key == "bundle_id" { bundleId = try reader.value() }
            else if key == "bid" { bid = try reader.value() }
            else if key == "application_version" { applicationVersion = try reader.value() }
            else if key == "bvrs" { bvrs = try reader.value() }
            else if key == "original_application_version" { originalApplicationVersion = try reader.value() }
            else if key == "receipt_creation_date_ms" { creationMs = try reader.value() }
            else if key == "receipt_creation_date" { creation = try reader.value() }
            else if key == "request_date_ms" { requestMs = try reader.value() }
            else if key == "request_date" { request = try reader.value() }
            else if key == "app_item_id" { appItemId = try reader.value() }
            else if key == "in_app" { inApp = try reader.flexibleArray { try Transaction(reading: &$0) } }
            else if try !legacy.take(key, &reader) { try reader.skipValue() }
        }
        self.receiptType = try receiptType?.string()
        self.bundleId = try bundleId?.string() ?? bid?.string()
        self.applicationVersion = try applicationVersion?.string() ?? bvrs?.string()
        self.originalApplicationVersion = try originalApplicationVersion?.string()
        receiptCreationDate = try AppleJSONValue.date("receipt_creation_date", milliseconds: creationMs, display: creation)
        requestDate = try AppleJSONValue.date("request_date", milliseconds: requestMs, display: request)
        originalPurchaseDate = try AppleJSONValue.date("original_purchase_date", milliseconds: legacy.originalPurchaseDateMs, display: legacy.originalPurchaseDate)
        self.appItemId = try appItemId?.string()
        if inApp.isEmpty, try legacy.transactionId?.string() != nil {
            self.inApp = [try Transaction(legacy)]
        } else {
            self.inApp = inApp
        }
    }
}

/// One entry of `latest_receipt_info` or `receipt.in_app`.
public struct Transaction: Sendable, Equatable {
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

    init(reading reader: inout AppleJSONReader) throws {
        var fields = TransactionFields(of: reader)
        try reader.enterObject()
        while let key = try reader.nextMember() {
            if try !fields.take(key, &reader) { try reader.skipValue() }
        }
        try self.init(fields)
    }

    fileprivate init(_ fields: borrowing TransactionFields) throws {
        guard let transactionId = try fields.transactionId?.string() else {
            throw AppleJSONError(description: "a transaction without transaction_id")
        }
        guard let productId = try fields.productId?.string() else {
            throw AppleJSONError(description: "a transaction without product_id")
        }
        self.transactionId = transactionId
        self.productId = productId
        originalTransactionId = try fields.originalTransactionId?.string()
        quantity = try fields.quantity?.int("quantity")
        purchaseDate = try AppleJSONValue.date("purchase_date", milliseconds: fields.purchaseDateMs, display: fields.purchaseDate)
        originalPurchaseDate = try AppleJSONValue.date("original_purchase_date", milliseconds: fields.originalPurchaseDateMs, display: fields.originalPurchaseDate)
        expiresDate = try AppleJSONValue.date("expires_date", milliseconds: fields.expiresDateMs, display: fields.expiresDate)
        cancellationDate = try AppleJSONValue.date("cancellation_date", milliseconds: fields.cancellationDateMs, display: fields.cancellationDate)
        cancellationReason = try fields.cancellationReason?.int("cancellation_reason")
        isUpgraded = try fields.isUpgraded?.bool()
        isTrialPeriod = try fields.isTrialPeriod?.bool()
        isInIntroOfferPeriod = try fields.isInIntroOfferPeriod?.bool()
        webOrderLineItemId = try fields.webOrderLineItemId?.string()
        subscriptionGroupIdentifier = try fields.subscriptionGroupIdentifier?.string()
        offerCodeRefName = try fields.offerCodeRefName?.string()
        promotionalOfferId = try fields.promotionalOfferId?.string()
        inAppOwnershipType = try fields.inAppOwnershipType?.string()
    }
}

/// The members of one transaction object as they go by, read once the object is whole (a
/// display date counts only when its `_ms` field is missing, which is known only at the end).
/// `~Escapable` as the values it keeps; made for one reader (`of:`), whose lifetime it takes.
private struct TransactionFields: ~Escapable {
    var transactionId: Optional<AppleJSONValue>
    var originalTransactionId: Optional<AppleJSONValue>
    var productId: Optional<AppleJSONValue>
    var quantity: Optional<AppleJSONValue>
    var purchaseDateMs: Optional<AppleJSONValue>
    var purchaseDate: Optional<AppleJSONValue>
    var originalPurchaseDateMs: Optional<AppleJSONValue>
    var originalPurchaseDate: Optional<AppleJSONValue>
    var expiresDateMs: Optional<AppleJSONValue>
    var expiresDate: Optional<AppleJSONValue>
    var cancellationDateMs: Optional<AppleJSONValue>
    var cancellationDate: Optional<AppleJSONValue>
    var cancellationReason: Optional<AppleJSONValue>
    var isUpgraded: Optional<AppleJSONValue>
    var isTrialPeriod: Optional<AppleJSONValue>
    var isInIntroOfferPeriod: Optional<AppleJSONValue>
    var webOrderLineItemId: Optional<AppleJSONValue>
    var subscriptionGroupIdentifier: Optional<AppleJSONValue>
    var offerCodeRefName: Optional<AppleJSONValue>
    var promotionalOfferId: Optional<AppleJSONValue>
    var inAppOwnershipType: Optional<AppleJSONValue>

    @_lifetime(copy reader)
    init(of reader: borrowing AppleJSONReader) {
        transactionId = nil
        originalTransactionId = nil
        productId = nil
        quantity = nil
        purchaseDateMs = nil
        purchaseDate = nil
        originalPurchaseDateMs = nil
        originalPurchaseDate = nil
        expiresDateMs = nil
        expiresDate = nil
        cancellationDateMs = nil
        cancellationDate = nil
        cancellationReason = nil
        isUpgraded = nil
        isTrialPeriod = nil
        isInIntroOfferPeriod = nil
        webOrderLineItemId = nil
        subscriptionGroupIdentifier = nil
        offerCodeRefName = nil
        promotionalOfferId = nil
        inAppOwnershipType = nil
    }

    /// Keeps the member if it is a transaction's; false (nothing consumed) otherwise. Dispatched
    /// on the name's length first: an answer has about 40 names per transaction, most unknown.
    @_lifetime(self: copy self, copy reader)
    mutating func take(_ key: borrowing AppleJSONKey, _ reader: inout AppleJSONReader) throws -> Bool {
        switch key.count {
        case 8 where key == "quantity": quantity = try reader.value()
        case 10 where key == "product_id": productId = try reader.value()
        case 11 where key == "is_upgraded": isUpgraded = try reader.value()
        case 12 where key == "expires_date": expiresDate = try reader.value()
        case 13 where key == "purchase_date": purchaseDate = try reader.value()
        case 14 where key == "transaction_id": transactionId = try reader.value()
        case 15 where key == "expires_date_ms": expiresDateMs = try reader.value()
        case 15 where key == "is_trial_period": isTrialPeriod = try reader.value()
        case 16 where key == "purchase_date_ms": purchaseDateMs = try reader.value()
        case 17 where key == "cancellation_date": cancellationDate = try reader.value()
        case 19 where key == "cancellation_reason": cancellationReason = try reader.value()
        case 19 where key == "offer_code_ref_name": offerCodeRefName = try reader.value()
        case 20 where key == "cancellation_date_ms": cancellationDateMs = try reader.value()
        case 20 where key == "promotional_offer_id": promotionalOfferId = try reader.value()
        case 21 where key == "in_app_ownership_type": inAppOwnershipType = try reader.value()
        case 22 where key == "original_purchase_date": originalPurchaseDate = try reader.value()
        case 22 where key == "web_order_line_item_id": webOrderLineItemId = try reader.value()
        case 23 where key == "original_transaction_id": originalTransactionId = try reader.value()
        case 24 where key == "is_in_intro_offer_period": isInIntroOfferPeriod = try reader.value()
        case 25 where key == "original_purchase_date_ms": originalPurchaseDateMs = try reader.value()
        case 29 where key == "subscription_group_identifier": subscriptionGroupIdentifier = try reader.value()
        default: return false
        }
        return true
    }
}

/// One entry of `pending_renewal_info`: what happens at the next renewal of a chain.
public struct PendingRenewalInfo: Sendable, Equatable {
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

    init(reading reader: inout AppleJSONReader) throws {
        var originalTransactionId: AppleJSONValue? = nil, productId: AppleJSONValue? = nil
        var autoRenewProductId: AppleJSONValue? = nil, autoRenewStatus: AppleJSONValue? = nil
        var expirationIntent: AppleJSONValue? = nil, graceMs: AppleJSONValue? = nil, grace: AppleJSONValue? = nil
        var billingRetry: AppleJSONValue? = nil, priceConsent: AppleJSONValue? = nil
        try reader.enterObject()
        while let key = try reader.nextMember() {
            if key == "original_transaction_id" { originalTransactionId = try reader.value() }
            else if key == "product_id" { productId = try reader.value() }
            else if key == "auto_renew_product_id" { autoRenewProductId = try reader.value() }
            else if key == "auto_renew_status" { autoRenewStatus = try reader.value() }
            else if key == "expiration_intent" { expirationIntent = try reader.value() }
            else if key == "grace_period_expires_date_ms" { graceMs = try reader.value() }
            else if key == "grace_period_expires_date" { grace = try reader.value() }
            else if key == "is_in_billing_retry_period" { billingRetry = try reader.value() }
            else if key == "price_consent_status" { priceConsent = try reader.value() }
            else { try reader.skipValue() }
        }
        self.originalTransactionId = try originalTransactionId?.string()
        self.productId = try productId?.string()
        self.autoRenewProductId = try autoRenewProductId?.string()
        self.autoRenewStatus = try autoRenewStatus?.bool()
        self.expirationIntent = try expirationIntent?.int("expiration_intent")
        gracePeriodExpiresDate = try AppleJSONValue.date("grace_period_expires_date", milliseconds: graceMs, display: grace)
        isInBillingRetryPeriod = try billingRetry?.bool()
        self.priceConsentStatus = try priceConsent?.int("price_consent_status")
    }
}
