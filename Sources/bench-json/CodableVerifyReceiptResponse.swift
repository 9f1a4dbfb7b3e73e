// The verifyReceipt decoding with JSONDecoder, as the project had it before its hand-written
// reader (commit 6eee144^), kept only to measure the reader against: see scripts/bench-json.
import AppStoreModels
import Foundation

import Foundation

/// Apple's JSON as it really comes: numbers as strings or numbers, flags as "true"/"false",
/// "1"/"0", true/false or 1/0, ids as strings or numbers. Every reader here returns nil for a
/// missing key or JSON null, and throws only for a value no spelling can explain.
struct CodableAppleKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ string: String) { stringValue = string }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension KeyedDecodingContainer where Key == CodableAppleKey {
    /// A string, or a number written as its decimal text (ids such as `transaction_id`).
    func flexibleString(_ key: String) throws -> String? {
        let key = CodableAppleKey(key)
        guard contains(key), try !decodeNil(forKey: key) else { return nil }
        if let text = try? decode(String.self, forKey: key) { return text }
        if let number = try? decode(Int64.self, forKey: key) { return String(number) }
        if let number = try? decode(Double.self, forKey: key), number.rounded() == number, abs(number) < 1e18 {
            return String(Int64(number))
        }
        if let flag = try? decode(Bool.self, forKey: key) { return flag ? "true" : "false" }
        throw DecodingError.typeMismatch(
            String.self, .init(codingPath: codingPath + [key], debugDescription: "expected a string or a number"))
    }

    /// An integer written as a number or as decimal text; empty text counts as missing.
    func flexibleInt64(_ key: String) throws -> Int64? {
        guard let text = try flexibleString(key)?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        if let value = Int64(text) { return value }
        if let value = Double(text), value.rounded() == value, abs(value) < 9e18 { return Int64(value) }
        throw DecodingError.dataCorrupted(
            .init(codingPath: codingPath + [CodableAppleKey(key)], debugDescription: "expected an integer"))
    }

    func flexibleInt(_ key: String) throws -> Int? {
        try flexibleInt64(key).map { Int($0) }
    }

    /// A flag in any of Apple's spellings: true/false, "true"/"false", 1/0, "1"/"0".
    func flexibleBool(_ key: String) throws -> Bool? {
        let codingKey = CodableAppleKey(key)
        guard contains(codingKey), try !decodeNil(forKey: codingKey) else { return nil }
        if let flag = try? decode(Bool.self, forKey: codingKey) { return flag }
        if let number = try? decode(Int.self, forKey: codingKey) {
            if number == 1 { return true }
            if number == 0 { return false }
        }
        if let text = try? decode(String.self, forKey: codingKey) {
            switch text.trimmingCharacters(in: .whitespaces).lowercased() {
            case "true", "1", "yes": return true
            case "false", "0", "no": return false
            case "": return nil
            default: break
            }
        }
        throw DecodingError.dataCorrupted(
            .init(codingPath: codingPath + [codingKey], debugDescription: "expected a flag (true/false or 1/0)"))
    }

    /// A time from `<name>_ms` (milliseconds since 1970, string or number). When Apple left out
    /// the `_ms` field, the display field `<name>` is read instead if it holds milliseconds or
    /// `yyyy-MM-dd HH:mm:ss Etc/GMT` (legacy and hand-made answers do this).
    func appleDate(_ name: String) throws -> Date? {
        if let milliseconds = try flexibleInt64(name + "_ms") {
            return Date(milliseconds: milliseconds)
        }
        guard let display = try? flexibleString(name), !display.isEmpty else { return nil }
        if let milliseconds = Int64(display) { return Date(milliseconds: milliseconds) }
        return CodableAppleDisplayDate.parse(display)
    }

    /// An array, or a single object where Apple sometimes sends one (legacy answers).
    func flexibleArray<Element: Decodable>(_ key: String, of type: Element.Type) throws -> [Element] {
        let codingKey = CodableAppleKey(key)
        guard contains(codingKey), try !decodeNil(forKey: codingKey) else { return [] }
        if let array = try? decode([Element].self, forKey: codingKey) { return array }
        return [try decode(Element.self, forKey: codingKey)]
    }
}

/// Apple's display dates, `2014-06-28 14:47:53 Etc/GMT`: only read when the `_ms` field is missing.
enum CodableAppleDisplayDate {
    static func parse(_ text: String) -> Date? {
        let parts = text.split(separator: " ")
        guard parts.count >= 2 else { return nil }
        if parts.count == 3, parts[2] != "Etc/GMT", parts[2] != "GMT", parts[2] != "UTC" { return nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return formatter.date(from: "\(parts[0]) \(parts[1])")
    }
}


/// The body of Apple's verifyReceipt answer, named as Apple names it.
///
/// Decoding is tolerant in the ways real answers require (see `FlexibleDecoding.swift`); only
/// what the job reads is kept, and unknown fields are ignored. Unknown status codes are kept as
/// numbers, never rejected.
struct CodableVerifyReceiptResponse: Decodable, Sendable, Equatable {
    /// 0 valid; 21006 valid but the subscription expired (legacy); 21002/21005/21009 and
    /// 21100-21199 are Apple's trouble; 21003, 21004, 21010 are the receipt's or the secret's.
    var status: Int
    /// `Production` or `Sandbox`.
    var environment: String?
    /// The retry flag, spelled `is-retryable` or `is_retryable`.
    var isRetryable: Bool?
    var exception: String?
    var receipt: CodableReceipt?
    /// The freshest base64 receipt for the account (may be a placeholder such as `[[REDACTED]]`).
    var latestReceipt: String?
    var latestReceiptInfo: [CodableTransaction]
    var pendingRenewalInfo: [CodablePendingRenewalInfo]

    init(
        status: Int, environment: String? = nil, isRetryable: Bool? = nil, exception: String? = nil,
        receipt: CodableReceipt? = nil, latestReceipt: String? = nil, latestReceiptInfo: [CodableTransaction] = [],
        pendingRenewalInfo: [CodablePendingRenewalInfo] = []
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

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodableAppleKey.self)
        guard let status = try container.flexibleInt("status") else {
            throw DecodingError.keyNotFound(CodableAppleKey("status"), .init(codingPath: [], debugDescription: "no status"))
        }
        self.status = status
        environment = try container.flexibleString("environment")
        isRetryable = try container.flexibleBool("is-retryable") ?? container.flexibleBool("is_retryable")
        exception = try? container.flexibleString("exception")
        receipt = try container.decodeIfPresent(CodableReceipt.self, forKey: CodableAppleKey("receipt"))
        latestReceipt = try? container.flexibleString("latest_receipt")
        // Legacy (iOS 6 style) answers put one object under latest_(expired_)receipt_info.
        var latest = try container.flexibleArray("latest_receipt_info", of: CodableTransaction.self)
        if latest.isEmpty {
            latest = try container.flexibleArray("latest_expired_receipt_info", of: CodableTransaction.self)
        }
        latestReceiptInfo = latest
        pendingRenewalInfo = try container.flexibleArray("pending_renewal_info", of: CodablePendingRenewalInfo.self)
    }

    /// Decodes an answer body; a UTF-8 byte order mark in front is skipped.
    static func decode(_ body: some Collection<UInt8>) throws -> CodableVerifyReceiptResponse {
        var bytes = Array(body)
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        return try JSONDecoder().decode(CodableVerifyReceiptResponse.self, from: Data(bytes))
    }
}

/// The decoded receipt inside an answer (`receipt`).
struct CodableReceipt: Decodable, Sendable, Equatable {
    /// `Production`, `ProductionSandbox`, ...
    var receiptType: String?
    var bundleId: String?
    var applicationVersion: String?
    var originalApplicationVersion: String?
    var receiptCreationDate: Date?
    var requestDate: Date?
    var originalPurchaseDate: Date?
    var appItemId: String?
    var inApp: [CodableTransaction]

    init(bundleId: String? = nil, inApp: [CodableTransaction] = []) {
        self.bundleId = bundleId
        self.inApp = inApp
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodableAppleKey.self)
        receiptType = try container.flexibleString("receipt_type")
        bundleId = try container.flexibleString("bundle_id") ?? container.flexibleString("bid")
        applicationVersion = try container.flexibleString("application_version") ?? container.flexibleString("bvrs")
        originalApplicationVersion = try container.flexibleString("original_application_version")
        receiptCreationDate = try container.appleDate("receipt_creation_date")
        requestDate = try container.appleDate("request_date")
        originalPurchaseDate = try container.appleDate("original_purchase_date")
        appItemId = try container.flexibleString("app_item_id")
        let inApp = try container.flexibleArray("in_app", of: CodableTransaction.self)
        if inApp.isEmpty, try container.flexibleString("transaction_id") != nil {
            // A legacy answer's receipt is itself one transaction.
            self.inApp = [try CodableTransaction(from: decoder)]
        } else {
            self.inApp = inApp
        }
    }
}

/// One entry of `latest_receipt_info` or `receipt.in_app`.
struct CodableTransaction: Decodable, Sendable, Equatable {
    var transactionId: String
    var originalTransactionId: String?
    var productId: String
    var quantity: Int?
    var purchaseDate: Date?
    var originalPurchaseDate: Date?
    var expiresDate: Date?
    var cancellationDate: Date?
    /// 1: the customer cancelled for an issue in the app; 0: another reason.
    var cancellationReason: Int?
    var isUpgraded: Bool?
    var isTrialPeriod: Bool?
    var isInIntroOfferPeriod: Bool?
    var webOrderLineItemId: String?
    var subscriptionGroupIdentifier: String?
    var offerCodeRefName: String?
    var promotionalOfferId: String?
    /// `PURCHASED` or `FAMILY_SHARED`.
    var inAppOwnershipType: String?

    init(
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

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodableAppleKey.self)
        guard let transactionId = try container.flexibleString("transaction_id") else {
            throw DecodingError.keyNotFound(
                CodableAppleKey("transaction_id"), .init(codingPath: container.codingPath, debugDescription: "a transaction without transaction_id"))
        }
        guard let productId = try container.flexibleString("product_id") else {
            throw DecodingError.keyNotFound(
                CodableAppleKey("product_id"), .init(codingPath: container.codingPath, debugDescription: "a transaction without product_id"))
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
struct CodablePendingRenewalInfo: Decodable, Sendable, Equatable {
    var originalTransactionId: String?
    var productId: String?
    var autoRenewProductId: String?
    var autoRenewStatus: Bool?
    /// 1 customer cancelled, 2 billing error, 3 price increase not consented, 4 product unavailable, 5 unknown.
    var expirationIntent: Int?
    var gracePeriodExpiresDate: Date?
    var isInBillingRetryPeriod: Bool?
    var priceConsentStatus: Int?

    init(
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

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodableAppleKey.self)
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
