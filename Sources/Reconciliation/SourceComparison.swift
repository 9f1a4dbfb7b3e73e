import AppStoreModels
import CivilCalendar
import Foundation

/// One point where verifyReceipt and the App Store Server API disagree about an account
/// (`--source both`): a row of `disagreements.csv`.
public struct Disagreement: Sendable, Equatable, Codable {
    public enum Kind: String, Sendable, CaseIterable, Codable, CodingKeyRepresentable {
        case onlyInVerifyReceipt = "transaction_only_in_verify_receipt"
        case onlyInServerAPI = "transaction_only_in_server_api"
        case expiry = "expiry_differs"
        case refundOnlyInVerifyReceipt = "refund_only_in_verify_receipt"
        case refundOnlyInServerAPI = "refund_only_in_server_api"
        case state = "state_differs"
    }

    public var accountId: String
    public var kind: Kind
    public var productId: String
    public var transactionId: String?
    /// What each source said (a time, a state, or empty for "nothing").
    public var verifyReceipt: String?
    public var serverAPI: String?

    public init(accountId: String, kind: Kind, productId: String, transactionId: String? = nil, verifyReceipt: String?, serverAPI: String?) {
        self.accountId = accountId
        self.kind = kind
        self.productId = productId
        self.transactionId = transactionId
        self.verifyReceipt = verifyReceipt
        self.serverAPI = serverAPI
    }
}

/// Compares what the two sources verified of one account: pure, so the migration's evidence is
/// as testable as the rules.
public enum SourceComparison {
    /// Every disagreement, in a stable order: transactions by id, then entitlements by product.
    /// A finished consumable only the Server API lists is no disagreement: verifyReceipt drops
    /// them once the app finished them, by design.
    public static func disagreements(
        accountId: String, verifyReceipt: [VerifiedFacts], serverAPI: [VerifiedFacts], rules: EntitlementRules, now: Date
    ) -> [Disagreement] {
        let left = EntitlementRules.union(verifyReceipt), right = EntitlementRules.union(serverAPI)
        let leftById = Dictionary(left.map { ($0.transaction.transactionId, $0) }, uniquingKeysWith: { first, _ in first })
        let rightById = Dictionary(right.map { ($0.transaction.transactionId, $0) }, uniquingKeysWith: { first, _ in first })
        var found: [Disagreement] = []
        func time(_ date: Date?) -> String? { date.map { Timestamp.format($0) } }
        for id in Set(leftById.keys).union(rightById.keys).sorted() {
            switch (leftById[id], rightById[id]) {
            case (let only?, nil):
                found.append(Disagreement(accountId: accountId, kind: .onlyInVerifyReceipt, productId: only.transaction.productId,
                                          transactionId: id, verifyReceipt: time(only.transaction.purchaseDate), serverAPI: nil))
            case (nil, let only?):
                let product = only.transaction.productId
                let consumable = rules.productType(product, transactions: [only]) == .consumable
                guard !consumable else { continue }
                found.append(Disagreement(accountId: accountId, kind: .onlyInServerAPI, productId: only.transaction.productId,
                                          transactionId: id, verifyReceipt: nil, serverAPI: time(only.transaction.purchaseDate)))
            case (let a?, let b?):
                let product = a.transaction.productId
                if a.transaction.expiresDate != b.transaction.expiresDate {
                    found.append(Disagreement(accountId: accountId, kind: .expiry, productId: product, transactionId: id,
                                              verifyReceipt: time(a.transaction.expiresDate), serverAPI: time(b.transaction.expiresDate)))
                }
                switch (a.transaction.cancellationDate, b.transaction.cancellationDate) {
                case (let refunded?, nil):
                    found.append(Disagreement(accountId: accountId, kind: .refundOnlyInVerifyReceipt, productId: product, transactionId: id,
                                              verifyReceipt: time(refunded), serverAPI: nil))
                case (nil, let refunded?):
                    found.append(Disagreement(accountId: accountId, kind: .refundOnlyInServerAPI, productId: product, transactionId: id,
                                              verifyReceipt: nil, serverAPI: time(refunded)))
                default: break
                }
            case (nil, nil): break
            }
        }
        let leftEntitlements = Dictionary(
            rules.entitlements(accountId: accountId, receipts: verifyReceipt, union: left, now: now).map { ($0.productId, $0) },
            uniquingKeysWith: { first, _ in first })
        let rightEntitlements = Dictionary(
            rules.entitlements(accountId: accountId, receipts: serverAPI, union: right, now: now).map { ($0.productId, $0) },
            uniquingKeysWith: { first, _ in first })
        for product in Set(leftEntitlements.keys).union(rightEntitlements.keys).sorted() {
            let a = leftEntitlements[product]?.state, b = rightEntitlements[product]?.state
            if a != b {
                found.append(Disagreement(accountId: accountId, kind: .state, productId: product,
                                          verifyReceipt: a?.rawValue, serverAPI: b?.rawValue))
            }
        }
        return found
    }
}
