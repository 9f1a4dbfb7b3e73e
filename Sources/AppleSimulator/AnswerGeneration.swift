import AppStoreModels
import CivilCalendar
import Foundation

/// Builds a verifyReceipt answer from a short description, with the fields and sizes of real
/// answers (display dates in GMT and PST beside each `_ms`), so the demo and the benchmark can
/// make any number of accounts without stored answers:
///
///     "generate": {
///       "status": 0, "bundle_id": "com.example.app", "latest_receipt": "...",
///       "subscriptions": [{"product_id": "pro.monthly", "original_transaction_id": "1000001",
///                          "start_ms": 1700000000000, "period_ms": 2592000000, "renewals": 12,
///                          "cancel": {"at_ms": 1701000000000, "reason": 1, "upgraded": false},
///                          "auto_renew": true, "auto_renew_product_id": "pro.monthly",
///                          "grace_until_ms": 1702000000000, "billing_retry": false,
///                          "expiration_intent": 2, "ownership": "PURCHASED", "group": "20662382",
///                          "trial": true, "restored_copy": false}],
///       "purchases": [{"product_id": "coins.100", "transaction_id": "2000001", "purchase_ms": 1700000000000,
///                      "cancel": {"at_ms": 1700100000000, "reason": 0}, "in_latest": false}]
///     }
///
/// A subscription of n renewals has n transactions; the first has the original's id, renewal i
/// has the original's id followed by i in three digits. A `cancel` applies to the last one. The
/// first is a free trial unless `"trial": false`; `"restored_copy": true` adds the first restored
/// on another device (its id followed by `r`: the same original and web order line item).
struct AnswerGeneration: Sendable {
    struct Cancellation: Sendable {
        var atMilliseconds: Int64
        var reason: Int
        var isUpgrade: Bool
    }

    struct Subscription: Sendable {
        var productId: String
        var originalTransactionId: String
        var startMilliseconds: Int64
        var periodMilliseconds: Int64
        var renewals: Int
        var cancellation: Cancellation?
        var autoRenew: Bool
        var autoRenewProductId: String?
        var graceUntilMilliseconds: Int64?
        var isInBillingRetry: Bool
        var expirationIntent: Int?
        var ownership: String
        var group: String
        var isTrial = true
        var restoredCopy = false
    }

    struct Purchase: Sendable {
        var productId: String
        var transactionId: String
        var purchaseMilliseconds: Int64
        var quantity: Int
        var cancellation: Cancellation?
        /// Listed in `latest_receipt_info` too, as Apple lists in-app purchases beside subscriptions.
        var inLatest = false
    }

    var status: Int
    var bundleId: String
    var latestReceipt: String?
    var subscriptions: [Subscription]
    var purchases: [Purchase]

    init(_ spec: [String: Any]) throws {
        func int64(_ value: Any?) -> Int64? {
            if let number = value as? Int64 { return number }
            if let number = value as? Int { return Int64(number) }
            if let number = value as? Double { return Int64(exactly: number.rounded(.towardZero)) }
            if let text = value as? String { return Int64(text) }
            return nil
        }
        func cancellation(_ value: Any?) -> Cancellation? {
            guard let spec = value as? [String: Any], let at = int64(spec["at_ms"]) else { return nil }
            return Cancellation(atMilliseconds: at, reason: spec["reason"] as? Int ?? 0, isUpgrade: spec["upgraded"] as? Bool ?? false)
        }
        status = spec["status"] as? Int ?? 0
        bundleId = spec["bundle_id"] as? String ?? "com.example.app"
        latestReceipt = spec["latest_receipt"] as? String
        subscriptions = try (spec["subscriptions"] as? [[String: Any]] ?? []).map { item in
            guard let product = item["product_id"] as? String, let original = item["original_transaction_id"].map({ "\($0)" }) else {
                throw SimulatorError("a generated subscription needs product_id and original_transaction_id")
            }
            var subscription = Subscription(
                productId: product, originalTransactionId: original,
                startMilliseconds: int64(item["start_ms"]) ?? 1_700_000_000_000,
                periodMilliseconds: int64(item["period_ms"]) ?? 2_592_000_000,
                renewals: max(1, item["renewals"] as? Int ?? 1),
                cancellation: cancellation(item["cancel"]),
                autoRenew: item["auto_renew"] as? Bool ?? true,
                autoRenewProductId: item["auto_renew_product_id"] as? String,
                graceUntilMilliseconds: int64(item["grace_until_ms"]),
                isInBillingRetry: item["billing_retry"] as? Bool ?? false,
                expirationIntent: item["expiration_intent"] as? Int,
                ownership: item["ownership"] as? String ?? "PURCHASED",
                group: item["group"].map { "\($0)" } ?? "20662382")
            subscription.isTrial = item["trial"] as? Bool ?? true
            subscription.restoredCopy = item["restored_copy"] as? Bool ?? false
            return subscription
        }
        purchases = try (spec["purchases"] as? [[String: Any]] ?? []).map { item in
            guard let product = item["product_id"] as? String, let id = item["transaction_id"].map({ "\($0)" }) else {
                throw SimulatorError("a generated purchase needs product_id and transaction_id")
            }
            return Purchase(
                productId: product, transactionId: id, purchaseMilliseconds: int64(item["purchase_ms"]) ?? 1_700_000_000_000,
                quantity: item["quantity"] as? Int ?? 1, cancellation: cancellation(item["cancel"]), inLatest: item["in_latest"] as? Bool ?? false)
        }
    }

    /// Writes the answer as JSON text directly: the simulator must stay cheap next to the client
    /// it measures (a dictionary and JSONSerialization per answer cost it milliseconds). Its
    /// length is the answer's fields, written in Apple's order.
    func answer(receiptData: String, environment: String, excludeOldTransactions: Bool) throws -> [UInt8] {
        var json = JSONText()
        guard status == 0 || status == 21006 else {
            json.open()
            json.field("status", raw: String(status))
            json.field("environment", environment)
            json.close()
            return json.bytes
        }
        var chains: [[JSONText]] = []
        var pending: [JSONText] = []
        for subscription in subscriptions {
            var chain: [JSONText] = []
            let webOrderBase = Int64(String(decoding: subscription.originalTransactionId.utf8.filter { $0 &- 0x30 < 10 }.prefix(15), as: UTF8.self))
            for index in 0..<subscription.renewals {
                let purchase = subscription.startMilliseconds + Int64(index) * subscription.periodMilliseconds
                let id = index == 0 ? subscription.originalTransactionId
                    : subscription.originalTransactionId + (index < 10 ? "00" : index < 100 ? "0" : "") + String(index)
                for copy in index == 0 && subscription.restoredCopy ? [id, id + "r"] : [id] {
                    var transaction = Self.transaction(
                        productId: subscription.productId, transactionId: copy, originalTransactionId: subscription.originalTransactionId,
                        purchase: purchase, originalPurchase: subscription.startMilliseconds,
                        expires: purchase + subscription.periodMilliseconds, quantity: 1)
                    let webOrder = webOrderBase.map { $0 + 500_000_000 + Int64(index) } ?? Int64(index)
                    transaction.field("web_order_line_item_id", String(webOrder))
                    transaction.field("is_trial_period", index == 0 && subscription.isTrial ? "true" : "false")
                    transaction.field("subscription_group_identifier", subscription.group)
                    transaction.field("in_app_ownership_type", subscription.ownership)
                    if index == subscription.renewals - 1, copy == id, let cancellation = subscription.cancellation {
                        Self.addCancellation(cancellation, to: &transaction)
                    }
                    transaction.close()
                    chain.append(transaction)
                }
            }
            chains.append(chain)
            var renewal = JSONText()
            renewal.open()
            renewal.field("original_transaction_id", subscription.originalTransactionId)
            renewal.field("product_id", subscription.productId)
            renewal.field("auto_renew_product_id", subscription.autoRenewProductId ?? subscription.productId)
            renewal.field("auto_renew_status", subscription.autoRenew ? "1" : "0")
            renewal.field("is_in_billing_retry_period", subscription.isInBillingRetry ? "1" : "0")
            if let intent = subscription.expirationIntent { renewal.field("expiration_intent", String(intent)) }
            if let grace = subscription.graceUntilMilliseconds { Self.dateFields("grace_period_expires_date", grace, into: &renewal) }
            renewal.close()
            pending.append(renewal)
        }
        var purchasesJSON: [JSONText] = []
        var latestPurchases: [JSONText] = []
        for purchase in purchases {
            var transaction = Self.transaction(
                productId: purchase.productId, transactionId: purchase.transactionId, originalTransactionId: purchase.transactionId,
                purchase: purchase.purchaseMilliseconds, originalPurchase: purchase.purchaseMilliseconds, expires: nil,
                quantity: purchase.quantity)
            transaction.field("is_trial_period", "false")
            transaction.field("in_app_ownership_type", "PURCHASED")
            if let cancellation = purchase.cancellation { Self.addCancellation(cancellation, to: &transaction) }
            transaction.close()
            purchasesJSON.append(transaction)
            if purchase.inLatest { latestPurchases.append(transaction) }
        }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        json.open()
        json.field("status", raw: String(status))
        json.field("environment", environment)
        json.key("receipt")
        json.open()
        json.field("receipt_type", environment == "Sandbox" ? "ProductionSandbox" : "Production")
        for key in ["adam_id", "app_item_id", "download_id", "version_external_identifier"] { json.field(key, raw: "0") }
        json.field("bundle_id", bundleId)
        json.field("application_version", "1")
        json.field("original_application_version", "1.0")
        Self.dateFields("receipt_creation_date", now - 60_000, into: &json)
        Self.dateFields("request_date", now, into: &json)
        Self.dateFields("original_purchase_date", 1_375_340_400_000, into: &json)
        json.key("in_app")
        json.array(chains.flatMap { $0 } + purchasesJSON)
        json.close()
        json.field("latest_receipt", latestReceipt ?? receiptData)
        if !subscriptions.isEmpty || !latestPurchases.isEmpty {
            // Sorted by purchase date, as Apple sorts latest_receipt_info.
            let latest = chains.flatMap { excludeOldTransactions ? Array($0.suffix(1)) : $0 } + latestPurchases
            json.key("latest_receipt_info")
            json.array(latest.sorted { $0.sortKey < $1.sortKey })
            json.key("pending_renewal_info")
            json.array(pending)
        }
        json.close()
        return json.bytes
    }

    static func transaction(
        productId: String, transactionId: String, originalTransactionId: String, purchase: Int64, originalPurchase: Int64,
        expires: Int64?, quantity: Int
    ) -> JSONText {
        var transaction = JSONText()
        transaction.sortKey = purchase
        transaction.open()
        transaction.field("quantity", String(quantity))
        transaction.field("product_id", productId)
        transaction.field("transaction_id", transactionId)
        transaction.field("original_transaction_id", originalTransactionId)
        transaction.field("is_in_intro_offer_period", "false")
        dateFields("purchase_date", purchase, into: &transaction)
        dateFields("original_purchase_date", originalPurchase, into: &transaction)
        if let expires { dateFields("expires_date", expires, into: &transaction) }
        return transaction
    }

    static func addCancellation(_ cancellation: Cancellation, to transaction: inout JSONText) {
        dateFields("cancellation_date", cancellation.atMilliseconds, into: &transaction)
        transaction.field("cancellation_reason", String(cancellation.reason))
        if cancellation.isUpgrade { transaction.field("is_upgraded", "true") }
    }

    /// `name`, `name_ms` and `name_pst`, as Apple writes them. The display strings are only
    /// there for realistic sizes (nobody should read them): PST is written as UTC-8 all year.
    static func dateFields(_ name: String, _ milliseconds: Int64, into json: inout JSONText) {
        json.field(name, display(milliseconds) + " Etc/GMT")
        json.field(name + "_ms", String(milliseconds))
        json.field(name + "_pst", display(milliseconds - 8 * 3_600_000) + " America/Los_Angeles")
    }

    /// `yyyy-MM-dd HH:mm:ss` in UTC, without a (not thread-safe) formatter.
    static func display(_ milliseconds: Int64) -> String {
        let seconds = milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = seconds - days * 86_400
        let (year, month, day) = CivilCalendar.date(days: days)
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(year)-\(two(month))-\(two(day)) \(two(secondOfDay / 3600)):\(two(secondOfDay / 60 % 60)):\(two(secondOfDay % 60))"
    }
}

/// JSON text written by appending: objects, arrays, string and raw fields.
struct JSONText: Sendable {
    var bytes: [UInt8] = []
    /// Orders transactions by purchase date without parsing them back.
    var sortKey: Int64 = 0
    private var needsComma = false

    init() {
        bytes.reserveCapacity(1024)
    }

    mutating func open() {
        bytes.append(UInt8(ascii: "{"))
        needsComma = false
    }

    mutating func close() {
        bytes.append(UInt8(ascii: "}"))
        needsComma = true
    }

    mutating func key(_ name: String) {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
        string(name)
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
    }

    mutating func field(_ name: String, _ value: String) {
        key(name)
        string(value)
        needsComma = true
    }

    mutating func field(_ name: String, raw value: String) {
        key(name)
        bytes.append(contentsOf: value.utf8)
        needsComma = true
    }

    mutating func array(_ elements: [JSONText]) {
        bytes.append(UInt8(ascii: "["))
        for (index, element) in elements.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes.append(contentsOf: element.bytes)
        }
        bytes.append(UInt8(ascii: "]"))
        needsComma = true
    }

    private mutating func string(_ value: String) {
        JSONString.append(value, to: &bytes)
    }
}
