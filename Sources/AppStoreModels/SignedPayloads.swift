import Foundation

/// The claims every signed payload is checked against (docs/notifications.md, "Signed data and Server Notifications V2"): when it was signed,
/// for which app, in which environment. Where a payload has none of them, nil.
public struct SignedClaims: Sendable, Equatable {
    public var signedDate: Date?
    /// Renewal infos carry none.
    public var bundleId: String?
    /// Only notifications (and app transactions) carry it, and only in production.
    public var appAppleId: Int64?
    /// `Production`, `Sandbox`; `Xcode` and `LocalTesting` exist too. Transactions signed in 2021 carry none.
    public var environment: String?

    public init(signedDate: Date? = nil, bundleId: String? = nil, appAppleId: Int64? = nil, environment: String? = nil) {
        self.signedDate = signedDate
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.environment = environment
    }
}

/// A payload Apple signs: decoded from the JWS payload's JSON, as tolerant as verifyReceipt's
/// answers (unknown fields ignored, missing optional ones nil, numbers as text accepted).
public protocol SignedPayload: Sendable {
    init(json: [UInt8]) throws
    var claims: SignedClaims { get }
    /// Whether the payload names the app's bundle id (renewal infos do not).
    static var carriesBundleId: Bool { get }
    /// Whether production payloads of this kind name the app's Apple id (notifications do).
    static var carriesAppAppleId: Bool { get }
}

extension SignedPayload {
    public static var carriesBundleId: Bool { true }
    public static var carriesAppAppleId: Bool { false }
}

/// `JWSTransactionDecodedPayload`: one transaction, as the Server API and V2 notifications sign it.
public struct JWSTransaction: SignedPayload, Equatable {
    public var transactionId: String
    public var originalTransactionId: String?
    public var webOrderLineItemId: String?
    public var bundleId: String?
    public var productId: String
    public var subscriptionGroupIdentifier: String?
    public var purchaseDate: Date?
    public var originalPurchaseDate: Date?
    public var expiresDate: Date?
    public var quantity: Int?
    /// As Apple wrote it; `type` reads it (nil for a value this program does not know).
    public var rawType: String?
    public var appAccountToken: String?
    /// As Apple wrote it; `inAppOwnershipType` reads it.
    public var rawInAppOwnershipType: String?
    public var signedDate: Date?
    /// 1: refunded for an issue in the app; 0: another reason.
    public var revocationReason: Int?
    public var revocationDate: Date?
    public var isUpgraded: Bool?
    /// 1 introductory, 2 promotional, 3 offer code, 4 win-back.
    public var offerType: Int?
    public var offerIdentifier: String?
    /// As Apple wrote it; `offerDiscountType` reads it.
    public var rawOfferDiscountType: String?
    public var storefront: String?
    public var storefrontId: String?
    /// As Apple wrote it; `transactionReason` reads it.
    public var rawTransactionReason: String?
    /// As Apple wrote it (`Production`, `Sandbox`, also `Xcode` or `LocalTesting`); `environment` reads it.
    public var rawEnvironment: String?
    /// In milliunits of `currency` (230000 JPY is ¥230).
    public var price: Int64?
    /// ISO 4217.
    public var currency: String?
    /// As Apple wrote it (`REFUND_FULL`, `REFUND_PRORATED`, `FAMILY_REVOKE`); `revocationType` reads it.
    public var rawRevocationType: String?
    /// The share refunded, in milliunits of a percent (100000 is 100 %): 0...100000, else a format error.
    public var revocationPercentage: Int?
    /// ISO 8601 duration of the offer (`P1Y`), as Apple wrote it.
    public var offerPeriod: String?
    /// The app download's transaction id.
    public var appTransactionId: String?
    /// An Advanced Commerce API purchase (`advancedCommerceInfo` present): Send Consumption
    /// Information V2 does not take those.
    public var hasAdvancedCommerceInfo = false

    public var claims: SignedClaims {
        SignedClaims(signedDate: signedDate, bundleId: bundleId, environment: rawEnvironment)
    }

    public init(json: [UInt8]) throws {
        var fields = SignedFields()
        try fields.read(json)
        guard let transactionId = try fields.string("transactionId") else { throw SignedFields.missing("transactionId") }
        guard let productId = try fields.string("productId") else { throw SignedFields.missing("productId") }
        self.transactionId = transactionId
        self.productId = productId
        originalTransactionId = try fields.string("originalTransactionId")
        webOrderLineItemId = try fields.string("webOrderLineItemId")
        bundleId = try fields.string("bundleId")
        subscriptionGroupIdentifier = try fields.string("subscriptionGroupIdentifier")
        purchaseDate = try fields.date("purchaseDate")
        originalPurchaseDate = try fields.date("originalPurchaseDate")
        expiresDate = try fields.date("expiresDate")
        quantity = try fields.int("quantity")
        rawType = try fields.string("type")
        appAccountToken = try fields.string("appAccountToken")
        rawInAppOwnershipType = try fields.string("inAppOwnershipType")
        signedDate = try fields.date("signedDate")
        revocationReason = try fields.int("revocationReason")
        revocationDate = try fields.date("revocationDate")
        isUpgraded = try fields.bool("isUpgraded")
        offerType = try fields.int("offerType")
        offerIdentifier = try fields.string("offerIdentifier")
        rawOfferDiscountType = try fields.string("offerDiscountType")
        storefront = try fields.string("storefront")
        storefrontId = try fields.string("storefrontId")
        rawTransactionReason = try fields.string("transactionReason")
        rawEnvironment = try fields.string("environment")
        price = try fields.int64("price")
        if let price, !Self.prices.contains(price) {
            throw AppleJSONError.outOfRange("price", "\(price) is not a price (0 to 10^15 - 1 milliunits)")
        }
        currency = try fields.string("currency")
        rawRevocationType = try fields.string("revocationType")
        revocationPercentage = try fields.int("revocationPercentage")
        if let percentage = revocationPercentage, !(0...100_000).contains(percentage) {
            // Never a wrong amount: the transaction is refused instead (docs/reports.md, "The finance journal").
            throw AppleJSONError.outOfRange("revocationPercentage", "\(percentage) is not 0 to 100000 (milliunits of a percent)")
        }
        offerPeriod = try fields.string("offerPeriod")
        appTransactionId = try fields.string("appTransactionId")
        hasAdvancedCommerceInfo = fields.isPresent("advancedCommerceInfo")
    }

    /// The prices a transaction may carry, in milliunits: never negative, and far below where
    /// sums and percentages of them could overflow (a trillion of any currency).
    public static let prices: ClosedRange<Int64> = 0...999_999_999_999_999

    /// The transaction in the ledger's and the rules' terms, the same as verifyReceipt's.
    public var ledgerTransaction: Transaction {
        let introductory = offerType == 1
        return Transaction(
            transactionId: transactionId, originalTransactionId: originalTransactionId, productId: productId,
            quantity: quantity, purchaseDate: purchaseDate, originalPurchaseDate: originalPurchaseDate,
            expiresDate: expiresDate, cancellationDate: revocationDate, cancellationReason: revocationReason,
            isUpgraded: isUpgraded,
            // Signed data says which kind of introductory offer; without offerDiscountType it is unknown.
            isTrialPeriod: introductory ? rawOfferDiscountType.map { $0 == OfferDiscountType.freeTrial.rawValue } : false,
            isInIntroOfferPeriod: introductory ? rawOfferDiscountType.map { $0 != OfferDiscountType.freeTrial.rawValue } : false,
            webOrderLineItemId: webOrderLineItemId, subscriptionGroupIdentifier: subscriptionGroupIdentifier,
            offerCodeRefName: offerType == 3 ? offerIdentifier : nil,
            promotionalOfferId: offerType == 2 ? offerIdentifier : nil,
            inAppOwnershipType: rawInAppOwnershipType)
    }

    /// `Auto-Renewable Subscription`, `Non-Consumable`, `Consumable`, `Non-Renewing Subscription`.
    public var type: SignedProductType? { rawType.flatMap(SignedProductType.init(rawValue:)) }
    public var inAppOwnershipType: InAppOwnershipType? { rawInAppOwnershipType.flatMap(InAppOwnershipType.init(rawValue:)) }
    public var offerDiscountType: OfferDiscountType? { rawOfferDiscountType.flatMap(OfferDiscountType.init(rawValue:)) }
    public var transactionReason: TransactionReason? { rawTransactionReason.flatMap(TransactionReason.init(rawValue:)) }
    public var revocationType: RevocationType? { rawRevocationType.flatMap(RevocationType.init(rawValue:)) }
    /// Production or the sandbox; nil for Xcode's and local testing's, and for none.
    public var environment: AppleEnvironment? { rawEnvironment.flatMap(AppleEnvironment.init(rawValue:)) }
}

/// `JWSRenewalInfoDecodedPayload`: the renewal state of one subscription chain.
public struct JWSRenewalInfo: SignedPayload, Equatable {
    public var originalTransactionId: String?
    public var productId: String?
    public var autoRenewProductId: String?
    /// `autoRenewStatus` as signed: 1 on, 0 off.
    public var rawAutoRenewStatus: Int?
    /// `expirationIntent` as signed (`ExpirationIntent`).
    public var rawExpirationIntent: Int?
    public var gracePeriodExpiresDate: Date?
    public var isInBillingRetryPeriod: Bool?
    /// `priceIncreaseStatus` as signed (`PriceIncreaseStatus`).
    public var rawPriceIncreaseStatus: Int?
    public var renewalDate: Date?
    public var recentSubscriptionStartDate: Date?
    public var signedDate: Date?
    /// `environment` as signed: `Production`, `Sandbox`.
    public var rawEnvironment: String?

    public var autoRenewStatus: AutoRenewStatus? { rawAutoRenewStatus.flatMap(AutoRenewStatus.init(rawValue:)) }
    public var expirationIntent: ExpirationIntent? { rawExpirationIntent.flatMap(ExpirationIntent.init(rawValue:)) }
    public var priceIncreaseStatus: PriceIncreaseStatus? { rawPriceIncreaseStatus.flatMap(PriceIncreaseStatus.init(rawValue:)) }
    public var environment: AppleEnvironment? { rawEnvironment.flatMap(AppleEnvironment.init(rawValue:)) }

    public var claims: SignedClaims { SignedClaims(signedDate: signedDate, environment: rawEnvironment) }
    public static var carriesBundleId: Bool { false }

    public init(json: [UInt8]) throws {
        var fields = SignedFields()
        try fields.read(json)
        originalTransactionId = try fields.string("originalTransactionId")
        productId = try fields.string("productId")
        autoRenewProductId = try fields.string("autoRenewProductId")
        rawAutoRenewStatus = try fields.int("autoRenewStatus")
        rawExpirationIntent = try fields.int("expirationIntent")
        gracePeriodExpiresDate = try fields.date("gracePeriodExpiresDate")
        isInBillingRetryPeriod = try fields.bool("isInBillingRetryPeriod")
        rawPriceIncreaseStatus = try fields.int("priceIncreaseStatus")
        renewalDate = try fields.date("renewalDate")
        recentSubscriptionStartDate = try fields.date("recentSubscriptionStartDate")
        signedDate = try fields.date("signedDate")
        rawEnvironment = try fields.string("environment")
    }
}

/// `ResponseBodyV2DecodedPayload`: an App Store Server Notification V2. Its transaction and
/// renewal info are JWS of their own, verified separately.
public struct NotificationV2Payload: SignedPayload, Equatable {
    /// `notificationType` as signed: `SUBSCRIBED`, `DID_RENEW`, `REFUND`, `TEST`, ... (`NotificationTypeV2`).
    public var rawNotificationType: String
    /// `subtype` as signed (`NotificationSubtype`).
    public var rawSubtype: String?
    public var notificationUUID: String?
    public var version: String?
    /// Missing in some real notifications (2022): the signed transaction's is used then.
    public var signedDate: Date?
    public var appAppleId: Int64?
    public var bundleId: String?
    public var bundleVersion: String?
    /// `data.environment` as signed.
    public var rawEnvironment: String?
    public var signedTransactionInfo: String?
    public var signedRenewalInfo: String?
    /// `data.status` as signed: the subscription's status (1 active ... 5 revoked), where Apple gives it.
    public var rawStatus: Int?
    /// `data.consumptionRequestReason` of a CONSUMPTION_REQUEST, as signed: why the customer asked
    /// for a refund (`UNINTENDED_PURCHASE`, `FULFILLMENT_ISSUE`, `UNSATISFIED_WITH_PURCHASE`, `LEGAL`, `OTHER`).
    public var rawConsumptionRequestReason: String?

    public var notificationType: NotificationTypeV2? { NotificationTypeV2(rawValue: rawNotificationType) }
    public var subtype: NotificationSubtype? { rawSubtype.flatMap(NotificationSubtype.init(rawValue:)) }
    public var environment: AppleEnvironment? { rawEnvironment.flatMap(AppleEnvironment.init(rawValue:)) }
    public var status: SubscriptionStatus? { rawStatus.flatMap(SubscriptionStatus.init(rawValue:)) }

    /// `v2 TYPE/SUBTYPE` as Apple wrote them: how a run counts and logs it, and `explain` shows it.
    public var label: String { "v2 " + rawNotificationType + (rawSubtype.map { "/" + $0 } ?? "") }

    public var claims: SignedClaims {
        SignedClaims(signedDate: signedDate, bundleId: bundleId, appAppleId: appAppleId, environment: rawEnvironment)
    }
    public static var carriesAppAppleId: Bool { true }

    public init(json: [UInt8]) throws {
        var fields = SignedFields(nested: "data")
        try fields.read(json)
        guard let type = try fields.string("notificationType") else { throw SignedFields.missing("notificationType") }
        rawNotificationType = type
        rawSubtype = try fields.string("subtype")
        notificationUUID = try fields.string("notificationUUID")
        version = try fields.string("version")
        signedDate = try fields.date("signedDate")
        appAppleId = try fields.int64("data.appAppleId")
        bundleId = try fields.string("data.bundleId")
        bundleVersion = try fields.string("data.bundleVersion")
        rawEnvironment = try fields.string("data.environment")
        signedTransactionInfo = try fields.string("data.signedTransactionInfo")
        signedRenewalInfo = try fields.string("data.signedRenewalInfo")
        rawStatus = try fields.int("data.status")
        rawConsumptionRequestReason = try fields.string("data.consumptionRequestReason")
    }
}

/// The V2 body Apple posts: `{"signedPayload": "<JWS>"}`.
public enum NotificationV2Body {
    /// The signed payload of a V2 body; nil for a body that is not one (a v1 notification).
    public static func signedPayload(_ body: some Collection<UInt8>) -> String? {
        try? AppleJSONReader.read(body) { reader -> String? in
            var payload: String?
            try reader.readObject { key, reader in
                if key == "signedPayload", try reader.peek() == .string { payload = try reader.value().string() } else { try reader.skipValue() }
            }
            return payload
        }
    }

    /// The notification's UUID read without verification: only to store a body once (ingestion),
    /// never to act on it.
    public static func unverifiedNotificationUUID(_ body: some Collection<UInt8>) -> String? {
        guard let signed = signedPayload(body), let jws = try? CompactJWS(signed) else { return nil }
        return UnverifiedPayload(jws.payload).notificationUUID
    }
}

/// The scalar members of a signed payload's object (and of one nested object), kept as text and
/// read on demand with Apple's tolerance: the payloads are small, and their fields many.
struct SignedFields {
    private var values: [String: Scalar] = [:]
    /// Members whose value is an object or an array: only their presence is kept.
    private var containers: Set<String> = []
    private let nested: String?

    private enum Scalar {
        case string(String)
        case number(String)
        case bool(Bool)
    }

    init(nested: String? = nil) {
        self.nested = nested
    }

    static func missing(_ name: String) -> AppleJSONError {
        AppleJSONError(description: "no \(name)")
    }

    mutating func read(_ json: [UInt8]) throws {
        var values: [String: Scalar] = [:]
        var containers: Set<String> = []
        func members(_ reader: inout AppleJSONReader, prefix: String, nestedName: String?) throws {
            try reader.readObject { key, reader in
                let name = prefix + key.string
                switch try reader.peek() {
                case .object where name == nestedName: try members(&reader, prefix: name + ".", nestedName: nil)
                case .string:
                    if let text = try reader.value().string() { values[name] = .string(text) }
                case .number: values[name] = .number(String(decoding: try reader.value().bytes, as: UTF8.self))
                case .bool: values[name] = try reader.value().bool().map(Scalar.bool)
                case .object, .array:
                    containers.insert(name)
                    try reader.skipValue()
                case .null: try reader.skipValue()
                }
            }
        }
        try AppleJSONReader.read(json) { reader in try members(&reader, prefix: "", nestedName: nested) }
        self.values = values
        self.containers = containers
    }

    /// Whether the member is there, whatever its value (null aside).
    func isPresent(_ name: String) -> Bool {
        values[name] != nil || containers.contains(name)
    }

    func string(_ name: String) throws -> String? {
        switch values[name] {
        case nil: return nil
        case .string(let text): return text
        case .number(let text):
            if let whole = Int64(text) { return String(whole) }
            throw AppleJSONError(description: "\(name): expected a string, found \(text)")
        case .bool(let flag): return String(flag)
        }
    }

    func int64(_ name: String) throws -> Int64? {
        guard let text = try string(name)?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        guard let value = Int64(text) else { throw AppleJSONError(description: "\(name): expected an integer") }
        return value
    }

    func int(_ name: String) throws -> Int? {
        guard let value = try int64(name) else { return nil }
        // Int32(exactly:) where `abs` once trapped on -2^63 (a forged quantity stopped every run).
        guard let small = Int32(exactly: value) else {
            throw AppleJSONError.outOfRange(name, "\(value) is out of range for a count or a code")
        }
        return Int(small)
    }

    func bool(_ name: String) throws -> Bool? {
        switch values[name] {
        case nil: return nil
        case .bool(let flag): return flag
        case .number(let text), .string(let text):
            switch text.lowercased() {
            case "true", "1": return true
            case "false", "0": return false
            default: throw AppleJSONError(description: "\(name): expected a flag")
            }
        }
    }

    /// Milliseconds since 1970; Xcode's signed data has fractions of one, cut off here.
    func date(_ name: String) throws -> Date? {
        switch values[name] {
        case nil: return nil
        case .number(let text), .string(let text): return try Self.date(text: text, field: name)
        case .bool: throw AppleJSONError(description: "\(name): expected milliseconds since 1970")
        }
    }

    /// A time from its text as signed (a number, or a string of one). The one reading of signed
    /// dates, for verified payloads and for an unverified `signedDate` alike.
    static func date(text: String, field name: String) throws -> Date {
        if let milliseconds = Int64(text) { return try Date(appleMilliseconds: milliseconds, field: name) }
        // A fraction (Xcode's) is cut off; the range is checked before the conversion, which cannot trap then.
        guard let milliseconds = Double(text), milliseconds.isFinite, abs(milliseconds) < 1e15 else {
            throw AppleJSONError(description: "\(name): expected milliseconds since 1970")
        }
        return try Date(appleMilliseconds: Int64(milliseconds.rounded(.down)), field: name)
    }
}
