import AppStoreModels
import Foundation
import Locking

extension SimulatedAPIChain {
    /// The Server API's view of receipts the simulator answers through verifyReceipt: the same
    /// world through both doors. Each synthetic receipt's answer becomes one chain per original
    /// transaction (its transactions and pending renewal info, in Apple's signed names).
    /// `disagreements` (original id -> `{"refund": true}` or `{"expires_shift_days": N}`) makes
    /// the API deliberately disagree with verifyReceipt, for the demo and the tests.
    /// `productTypes` (product id -> Apple's signed `type`) says what each product is, as Apple
    /// signs it; a product it does not name is signed a subscription when it expires, else a
    /// non-consumable. `signedTerms` (transaction id -> signed fields: `price`, `currency`,
    /// `offerDiscountType`, `revocationType`, `revocationPercentage`, ...) adds what only Apple's
    /// signed data says, which verifyReceipt never did (a price, its currency, a refund's share).
    static func chains(fromReceipts blobs: [String], disagreements: [String: [String: Any]], productTypes: [String: String] = [:],
                       signedTerms: [String: [String: Any]] = [:]) throws -> [String: SimulatedAPIChain]
    {
        var chains: [String: SimulatedAPIChain] = [:]
        for blob in blobs {
            // A blob that is no synthetic receipt (the demo's malformed one) has no API counterpart.
            guard let decoded = Data(base64Encoded: blob), let spec = SimulatedAppReceipt.embeddedSpec(decoded) else { continue }
            let receipt = try SimulatedReceipt(json: Data(spec))
            guard receipt.faults.isEmpty else { continue }  // a receipt scripted to fail is not in the API's world
            let answer = try receipt.answer(receiptData: blob, environment: receipt.environment, excludeOldTransactions: false)
            guard let object = try JSONSerialization.jsonObject(with: Data(answer)) as? [String: Any] else { continue }
            let latest = object["latest_receipt_info"] as? [[String: Any]] ?? (object["receipt"] as? [String: Any])?["in_app"] as? [[String: Any]] ?? []
            let pending = object["pending_renewal_info"] as? [[String: Any]] ?? []
            let byChain = Dictionary(grouping: latest, by: { ($0["original_transaction_id"] ?? $0["transaction_id"]).map { "\($0)" } ?? "" })
            // One receipt is one Apple ID: its chains are one customer, named by its first original id.
            let customer = byChain.keys.filter { !$0.isEmpty }.sorted().first
            for (original, items) in byChain {
                guard !original.isEmpty else { continue }
                var transactions = items.map { item in
                    Self.signedTransaction(item, productTypes: productTypes)
                        .merging((item["transaction_id"]).flatMap { signedTerms["\($0)"] } ?? [:]) { $1 }
                }
                let renewal = pending.first { ($0["original_transaction_id"]).map { "\($0)" } == original }.map(Self.signedRenewal)
                if let twist = disagreements[original], let last = transactions.indices.max(by: {
                    (transactions[$0]["purchaseDate"] as? Int64 ?? 0) < (transactions[$1]["purchaseDate"] as? Int64 ?? 0)
                }) {
                    if twist["refund"] as? Bool == true {
                        transactions[last]["revocationDate"] = Int64(Date().timeIntervalSince1970 * 1000) - 3_600_000
                        transactions[last]["revocationReason"] = 0
                    }
                    if let days = twist["expires_shift_days"] as? Int, let expires = transactions[last]["expiresDate"] as? Int64 {
                        transactions[last]["expiresDate"] = expires + Int64(days) * 86_400_000
                    }
                }
                chains[original] = SimulatedAPIChain(
                    customer: customer, environment: receipt.environment, bundleId: "com.example.app", pageSize: 20, status: 1,
                    transactions: transactions, renewal: renewal, faults: [])
            }
        }
        return chains
    }

    init(customer: String?, environment: String, bundleId: String, pageSize: Int, status: Int, transactions: [[String: Any]],
         renewal: [String: Any]?, faults: [SimulatedAPIFault]) {
        self.customer = customer
        self.environment = environment
        self.bundleId = bundleId
        self.pageSize = pageSize
        self.status = status
        self.transactions = transactions
        self.renewal = renewal
        self.faults = faults
    }

    private static func milliseconds(_ value: Any?) -> Int64? {
        value.flatMap { Int64("\($0)") }
    }

    /// A verifyReceipt transaction in the Server API's signed names.
    private static func signedTransaction(_ item: [String: Any], productTypes: [String: String]) -> [String: Any] {
        var signed: [String: Any] = [:]
        for (from, to) in [("transaction_id", "transactionId"), ("original_transaction_id", "originalTransactionId"),
                           ("product_id", "productId"), ("web_order_line_item_id", "webOrderLineItemId"),
                           ("subscription_group_identifier", "subscriptionGroupIdentifier"), ("in_app_ownership_type", "inAppOwnershipType")] {
            if let value = item[from] { signed[to] = "\(value)" }
        }
        for (from, to) in [("purchase_date_ms", "purchaseDate"), ("original_purchase_date_ms", "originalPurchaseDate"),
                           ("expires_date_ms", "expiresDate"), ("cancellation_date_ms", "revocationDate")] {
            if let value = milliseconds(item[from]) { signed[to] = value }
        }
        if let reason = milliseconds(item["cancellation_reason"]) { signed["revocationReason"] = reason }
        if let upgraded = item["is_upgraded"] { signed["isUpgraded"] = "\(upgraded)" == "true" }
        // An introductory offer, as Apple signs it: a free trial, or a paid one.
        if "\(item["is_trial_period"] ?? "")" == "true" {
            (signed["offerType"], signed["offerDiscountType"]) = (1, "FREE_TRIAL")
        } else if "\(item["is_in_intro_offer_period"] ?? "")" == "true" {
            (signed["offerType"], signed["offerDiscountType"]) = (1, "PAY_AS_YOU_GO")
        }
        signed["quantity"] = milliseconds(item["quantity"]) ?? 1
        signed["type"] = (signed["productId"] as? String).flatMap { productTypes[$0] }
            ?? (signed["expiresDate"] != nil ? "Auto-Renewable Subscription" : "Non-Consumable")
        return signed
    }

    private static func signedRenewal(_ item: [String: Any]) -> [String: Any] {
        var signed: [String: Any] = [:]
        if let value = item["original_transaction_id"] { signed["originalTransactionId"] = "\(value)" }
        if let value = item["product_id"] { signed["productId"] = "\(value)" }
        if let value = item["auto_renew_product_id"] { signed["autoRenewProductId"] = "\(value)" }
        if let value = milliseconds(item["auto_renew_status"]) { signed["autoRenewStatus"] = value }
        if let value = milliseconds(item["expiration_intent"]) { signed["expirationIntent"] = value }
        if let value = item["is_in_billing_retry_period"] { signed["isInBillingRetryPeriod"] = "\(value)" == "1" || "\(value)" == "true" }
        if let value = milliseconds(item["grace_period_expires_date_ms"]) { signed["gracePeriodExpiresDate"] = value }
        return signed
    }
}
