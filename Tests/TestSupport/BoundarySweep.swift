import Foundation

/// The boundary sweep: every boundary value put into every field of every Apple payload the job
/// reads, one at a time (docs/guarantees.md, "Hostile input"). The documents are written as
/// text, so that values no `JSONSerialization` can hold (-2^63 exactly, 1e400, a 400-digit
/// number) reach the decoders as an attacker would send them.
public enum BoundarySweep {
    /// One value as JSON text, and its name in a failure message.
    public struct Value: Sendable, CustomStringConvertible {
        public let name: String
        public let json: String
        public var description: String { name }
    }

    /// The numbers at every edge a conversion can trap on, each as a JSON number and as a string
    /// of one (Apple writes numbers both ways), then the wrong JSON types.
    public static let values: [Value] = {
        let numbers: [(String, String)] = [
            ("0", "0"), ("-1", "-1"), ("2^31", "2147483648"), ("-2^31", "-2147483648"), ("-2^31-1", "-2147483649"),
            ("2^53", "9007199254740992"), ("-2^53", "-9007199254740992"), ("2^63-1", "9223372036854775807"),
            ("-2^63", "-9223372036854775808"), ("2^64", "18446744073709551616"), ("-2^64", "-18446744073709551616"),
            ("9e18", "9e18"), ("1e308", "1e308"), ("-1e308", "-1e308"), ("5e-324", "5e-324"), ("-0", "-0"), ("1.5", "1.5"),
            ("1e400", "1e400"), ("400 digits", String(repeating: "9", count: 400)),
        ]
        var values = numbers.map { Value(name: $0.0, json: $0.1) }
        values += numbers.map { Value(name: "\"\($0.0)\"", json: "\"\($0.1)\"") }
        values += [
            Value(name: "\"NaN\"", json: "\"NaN\""), Value(name: "\"Infinity\"", json: "\"Infinity\""),
            Value(name: "\"-Infinity\"", json: "\"-Infinity\""), Value(name: "string", json: "\"lots\""),
            Value(name: "empty string", json: "\"\""), Value(name: "object", json: "{\"a\":1}"), Value(name: "array", json: "[1,2]"),
            Value(name: "true", json: "true"), Value(name: "false", json: "false"), Value(name: "null", json: "null"),
        ]
        return values
    }()

    /// A JSON document as a tree, rendered as text.
    public indirect enum Node: Sendable {
        case scalar(String)
        case object([(String, Node)])
        case array([Node])

        public var json: String {
            switch self {
            case .scalar(let text): text
            case .object(let members): "{" + members.map { "\"\($0.0)\":\($0.1.json)" }.joined(separator: ",") + "}"
            case .array(let elements): "[" + elements.map(\.json).joined(separator: ",") + "]"
            }
        }

        /// Every scalar's path (array elements as `[0]`).
        public var fields: [[String]] {
            switch self {
            case .scalar: [[]]
            case .object(let members): members.flatMap { key, node in node.fields.map { [key] + $0 } }
            case .array(let elements): elements.enumerated().flatMap { index, node in node.fields.map { ["[\(index)]"] + $0 } }
            }
        }

        /// The same document with the scalar at `path` written as `json`.
        public func replacing(_ path: ArraySlice<String>, with json: String) -> Node {
            guard let step = path.first else { return .scalar(json) }
            switch self {
            case .scalar: return self
            case .object(let members):
                return .object(members.map { $0.0 == step ? ($0.0, $0.1.replacing(path.dropFirst(), with: json)) : $0 })
            case .array(let elements):
                return .array(elements.enumerated().map { "[\($0.offset)]" == step ? $0.element.replacing(path.dropFirst(), with: json) : $0.element })
            }
        }
    }

    /// A document of one kind, and every variant of it the sweep makes.
    public struct Document: Sendable {
        public let name: String
        public let root: Node

        /// One variant: the field's path, the value put there, and the document's text.
        public struct Variant: Sendable {
            public let path: [String]
            public let value: Value
            public let json: String
            /// The member name the field has: what an error must name.
            public var key: String { path.last { !$0.hasPrefix("[") } ?? "" }
            public var label: String { path.joined(separator: ".") + " = " + value.name }
        }

        public var variants: [Variant] {
            root.fields.flatMap { path in
                values.map { Variant(path: path, value: $0, json: root.replacing(path[...], with: $0.json).json) }
            }
        }

        /// Every member name of the document.
        public var keys: Set<String> {
            func collect(_ node: Node) -> [String] {
                switch node {
                case .scalar: []
                case .object(let members): members.flatMap { [$0.0] + collect($0.1) }
                case .array(let elements): elements.flatMap(collect)
                }
            }
            return Set(collect(root))
        }
    }

    private static func text(_ value: String) -> Node { .scalar("\"\(value)\"") }
    private static func number(_ value: String) -> Node { .scalar(value) }

    // MARK: verifyReceipt and notifications v1

    /// One `latest_receipt_info` / `in_app` entry, every member the decoder reads.
    static let receiptTransaction: [(String, Node)] = [
        ("transaction_id", text("1000000000000002")), ("original_transaction_id", text("1000000000000001")),
        ("product_id", text("pro.monthly")), ("quantity", text("1")),
        ("purchase_date_ms", text("1700000000000")), ("purchase_date", text("2023-11-14 22:13:20 Etc/GMT")),
        ("original_purchase_date_ms", text("1690000000000")), ("original_purchase_date", text("2023-07-22 04:26:40 Etc/GMT")),
        ("expires_date_ms", text("1702592000000")), ("expires_date", text("2023-12-14 22:13:20 Etc/GMT")),
        ("cancellation_date_ms", text("1701000000000")), ("cancellation_date", text("2023-11-26 12:00:00 Etc/GMT")),
        ("cancellation_reason", text("0")), ("is_upgraded", text("false")), ("is_trial_period", text("false")),
        ("is_in_intro_offer_period", text("false")), ("web_order_line_item_id", text("1000000000000003")),
        ("subscription_group_identifier", text("20000001")), ("offer_code_ref_name", text("SPRING")),
        ("promotional_offer_id", text("promo1")), ("in_app_ownership_type", text("PURCHASED")),
    ]

    static let pendingRenewal: Node = .object([
        ("original_transaction_id", text("1000000000000001")), ("product_id", text("pro.monthly")),
        ("auto_renew_product_id", text("pro.monthly")), ("auto_renew_status", text("1")), ("expiration_intent", text("1")),
        ("grace_period_expires_date_ms", text("1703000000000")), ("grace_period_expires_date", text("2023-12-19 15:33:20 Etc/GMT")),
        ("is_in_billing_retry_period", text("0")), ("price_consent_status", text("1")),
    ])

    /// A whole verifyReceipt answer: status, receipt with `in_app`, `latest_receipt_info`, `pending_renewal_info`.
    public static let verifyReceiptAnswer = Document(name: "verifyReceipt answer", root: .object([
        ("status", number("0")), ("environment", text("Production")), ("is-retryable", .scalar("false")),
        ("is_retryable", .scalar("false")), ("exception", text("none")), ("latest_receipt", text("TUlJ")),
        ("receipt", .object([
            ("receipt_type", text("Production")), ("bundle_id", text("com.example.app")), ("bid", text("com.example.app")),
            ("application_version", text("1")), ("bvrs", text("1")), ("original_application_version", text("1.0")),
            ("receipt_creation_date_ms", text("1700000000000")), ("receipt_creation_date", text("2023-11-14 22:13:20 Etc/GMT")),
            ("request_date_ms", text("1700000000000")), ("request_date", text("2023-11-14 22:13:20 Etc/GMT")),
            ("app_item_id", number("1234")), ("original_purchase_date_ms", text("1690000000000")),
            ("in_app", .array([.object(receiptTransaction)])),
        ])),
        ("latest_receipt_info", .array([.object(receiptTransaction)])),
        ("pending_renewal_info", .array([pendingRenewal])),
    ]))

    /// An iOS 6 style answer: the receipt is itself the transaction, and `latest_expired_receipt_info` one object.
    public static let legacyVerifyReceiptAnswer = Document(name: "legacy verifyReceipt answer", root: .object([
        ("status", number("21006")),
        ("receipt", .object(receiptTransaction + [("bid", text("com.example.app")), ("bvrs", text("1"))])),
        ("latest_expired_receipt_info", .object(receiptTransaction)),
    ]))

    /// A server notification v1.
    public static let notificationV1 = Document(name: "notification v1", root: .object([
        ("notification_type", text("DID_RENEW")), ("password", text("secret")), ("environment", text("PROD")),
        ("auto_renew_status", text("true")), ("auto_renew_product_id", text("pro.monthly")), ("expiration_intent", text("1")),
        ("bid", text("com.example.app")), ("bvrs", text("1")), ("original_transaction_id", text("1000000000000001")),
        ("unified_receipt", .object([
            ("status", number("0")), ("environment", text("Production")), ("latest_receipt", text("TUlJ")),
            ("latest_receipt_info", .array([.object(receiptTransaction)])), ("pending_renewal_info", .array([pendingRenewal])),
        ])),
    ]))

    // MARK: The App Store Server API

    public static let transactionHistory = Document(name: "Get Transaction History", root: .object([
        ("revision", text("r1")), ("hasMore", .scalar("false")), ("environment", text("Production")),
        ("signedTransactions", .array([text("a.b.c")])),
    ]))

    public static let subscriptionStatuses = Document(name: "Get All Subscription Statuses", root: .object([
        ("environment", text("Production")),
        ("data", .array([.object([("lastTransactions", .array([.object([
            ("originalTransactionId", text("1000000000000001")), ("status", number("1")),
            ("signedTransactionInfo", text("a.b.c")), ("signedRenewalInfo", text("a.b.c")),
        ])]))])])),
    ]))

    public static let notificationHistory = Document(name: "Get Notification History", root: .object([
        ("paginationToken", text("t1")), ("hasMore", .scalar("true")),
        ("notificationHistory", .array([.object([("signedPayload", text("a.b.c"))])])),
    ]))

    public static let serverAPIError = Document(name: "Server API error", root: .object([
        ("errorCode", number("4040010")), ("errorMessage", text("Transaction id not found.")),
    ]))

    // MARK: Signed payloads

    public static let signedTransaction = Document(name: "signed transaction", root: .object([
            ("transactionId", text("2000000000000002")), ("originalTransactionId", text("2000000000000001")),
            ("webOrderLineItemId", text("2000000000000003")), ("bundleId", text("com.example.app")), ("productId", text("pro.monthly")),
            ("subscriptionGroupIdentifier", text("20000001")), ("purchaseDate", number("1699000000000")),
            ("originalPurchaseDate", number("1690000000000")), ("expiresDate", number("1701600000000")), ("quantity", number("1")),
            ("type", text("Auto-Renewable Subscription")), ("appAccountToken", text("7e3fb20b-4cdb-47cc-936d-99d65f608138")),
            ("inAppOwnershipType", text("PURCHASED")), ("signedDate", number("1700000000000")), ("revocationReason", number("0")),
            ("revocationDate", number("1699500000000")), ("isUpgraded", .scalar("false")), ("offerType", number("1")),
            ("offerIdentifier", text("intro")), ("offerDiscountType", text("PAY_AS_YOU_GO")), ("storefront", text("USA")),
            ("storefrontId", text("143441")), ("transactionReason", text("PURCHASE")), ("environment", text("Sandbox")),
            ("price", number("9990")), ("currency", text("USD")), ("revocationType", text("REFUND_PRORATED")),
            ("revocationPercentage", number("72500")), ("offerPeriod", text("P1M")), ("appTransactionId", text("704289572")),
            ("advancedCommerceInfo", .object([("requestReferenceId", text("ref-1")), ("estimatedTax", number("0"))])),
        ]))

    public static let signedRenewalInfo = Document(name: "signed renewal info", root: .object([
        ("originalTransactionId", text("2000000000000001")), ("productId", text("pro.monthly")), ("autoRenewProductId", text("pro.monthly")),
        ("autoRenewStatus", number("1")), ("expirationIntent", number("1")), ("gracePeriodExpiresDate", number("1701700000000")),
        ("isInBillingRetryPeriod", .scalar("false")), ("priceIncreaseStatus", number("0")), ("renewalDate", number("1701600000000")),
        ("recentSubscriptionStartDate", number("1690000000000")), ("signedDate", number("1700000000000")),
        ("environment", text("Sandbox")),
    ]))

    /// A V2 notification's payload; `signedTransactionInfo` and `signedRenewalInfo` are JWS made by the caller.
    public static func notificationV2(signedTransactionInfo: String, signedRenewalInfo: String) -> Document {
        Document(name: "notification V2", root: .object([
            ("notificationType", text("DID_RENEW")), ("subtype", text("BILLING_RECOVERY")),
            ("notificationUUID", text("0b4d1a9e-1f1e-4f3e-9d51-6f0c6a1d2e3f")), ("version", text("2.0")),
            ("signedDate", number("1700000000000")),
            ("data", .object([
                ("appAppleId", number("1234")), ("bundleId", text("com.example.app")), ("bundleVersion", text("1")),
                ("environment", text("Sandbox")), ("signedTransactionInfo", text(signedTransactionInfo)),
                ("signedRenewalInfo", text(signedRenewalInfo)), ("status", number("1")),
                ("consumptionRequestReason", text("UNINTENDED_PURCHASE")),
            ])),
        ]))
    }

    // MARK: The decoders' own keys

    /// Every member name the decoders of Apple's JSON read, taken from their source: a name they
    /// compare a key with (`key == "..."`) or a signed field they ask for (`fields.int64("...")`).
    /// A field added to a decoder later is in this set, so a sweep that misses it fails.
    public static func decodedKeys() throws -> [String: Set<String>] {
        let directory = TestPaths.repositoryRoot.appending(path: "Sources/AppStoreModels")
        var keys: [String: Set<String>] = [:]
        let patterns = [#"key == "([^"]+)""#, #"fields\.[a-z0-9]+\("([^"]+)"\)"#]
        for file in try FileManager.default.contentsOfDirectory(atPath: directory.path) where file.hasSuffix(".swift") {
            let source = try String(contentsOf: directory.appending(path: file), encoding: .utf8)
            for pattern in patterns {
                let expression = try NSRegularExpression(pattern: pattern)
                for match in expression.matches(in: source, range: NSRange(source.startIndex..., in: source)) {
                    guard let range = Range(match.range(at: 1), in: source) else { continue }
                    // Nested signed fields are asked for by path (`data.status`): the member is the last name.
                    let name = String(source[range].split(separator: ".").last ?? "")
                    keys[file, default: []].insert(name)
                }
            }
        }
        return keys
    }
}
