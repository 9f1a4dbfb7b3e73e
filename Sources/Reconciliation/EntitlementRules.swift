import AppStoreModels
import Foundation

/// One transaction of an account, after the union of its receipts.
public struct AccountTransaction: Sendable, Equatable {
    public var transaction: Transaction
    public var environment: AppleEnvironment
    /// Found in `latest_receipt_info` (which wins over `receipt.in_app` for the same id).
    public var fromLatestReceiptInfo: Bool
    /// Which of Apple's sources said it.
    public var source: AppleSource = .verifyReceipt
    /// Its money terms, where signed data gave them.
    public var signed: SignedTerms? = nil

    public var originalTransactionId: String { transaction.originalTransactionId ?? transaction.transactionId }
}

/// Whether sandbox transactions may grant entitlements (`--sandbox allow|deny`).
public enum SandboxPolicy: String, Sendable, CaseIterable {
    /// Sandbox purchases grant, marked `environment = 'Sandbox'` (App Review uses them).
    case allow
    /// Sandbox purchases grant nothing.
    case deny
}

/// The entitlement rules of docs/guarantees.md, "Entitlement rules", as pure functions of Apple's answers, the
/// catalog and one clock. No I/O: this is where the money is, and it is tested exhaustively.
public struct EntitlementRules: Sendable {
    public var catalog: [String: Product]
    public var sandboxPolicy: SandboxPolicy

    public init(catalog: [String: Product] = [:], sandboxPolicy: SandboxPolicy = .allow) {
        self.catalog = catalog
        self.sandboxPolicy = sandboxPolicy
    }

    /// The union of the receipts' transactions, one per `transaction_id`: an entry of
    /// `latest_receipt_info` wins over one of `receipt.in_app`; between equals, the later expiry.
    /// Sorted by purchase date, then id, so the result does not depend on Apple's array order.
    public static func union(_ receipts: [VerifiedFacts]) -> [AccountTransaction] {
        var byId: [String: AccountTransaction] = [:]
        func offer(_ candidate: AccountTransaction) {
            guard let existing = byId[candidate.transaction.transactionId] else {
                byId[candidate.transaction.transactionId] = candidate
                return
            }
            if candidate.fromLatestReceiptInfo != existing.fromLatestReceiptInfo {
                if candidate.fromLatestReceiptInfo { byId[candidate.transaction.transactionId] = candidate }
                return
            }
            let candidateExpiry = candidate.transaction.expiresDate ?? .distantPast
            let existingExpiry = existing.transaction.expiresDate ?? .distantPast
            if candidateExpiry > existingExpiry
                || (candidateExpiry == existingExpiry && candidate.transaction.cancellationDate != nil
                    && existing.transaction.cancellationDate == nil) {
                byId[candidate.transaction.transactionId] = candidate
            }
        }
        for receipt in receipts {
            for transaction in receipt.transactions {
                offer(AccountTransaction(
                    transaction: transaction, environment: receipt.environment, fromLatestReceiptInfo: true, source: receipt.source,
                    signed: receipt.signedTerms[transaction.transactionId]))
            }
            for transaction in receipt.receiptTransactions {
                offer(AccountTransaction(
                    transaction: transaction, environment: receipt.environment, fromLatestReceiptInfo: false, source: receipt.source))
            }
        }
        // Sorted by key, the transactions moved once: sorting the large values themselves moved
        // and copied them at every step (4 % of a nightly run's client CPU).
        let unique = Array(byId.values)
        let keys = unique.map { (purchased: $0.transaction.purchaseDate ?? .distantPast, id: $0.transaction.transactionId) }
        return keys.indices.sorted {
            keys[$0].purchased != keys[$1].purchased ? keys[$0].purchased < keys[$1].purchased : keys[$0].id < keys[$1].id
        }.map { unique[$0] }
    }

    /// Apple's `cancellation_reason` of every cancelled transaction, for the reasons in reports.
    public static func cancellationReasons(_ receipts: [VerifiedFacts]) -> [String: Int] {
        cancellationReasons(union(receipts))
    }

    /// The same from a union already made (the run makes it once per account).
    public static func cancellationReasons(_ union: [AccountTransaction]) -> [String: Int] {
        var reasons: [String: Int] = [:]
        for item in union {
            if let reason = item.transaction.cancellationReason { reasons[item.transaction.transactionId] = reason }
        }
        return reasons
    }

    /// The product's type: the catalog's, else auto-renewable when any of its transactions has
    /// an expiry, else non-consumable.
    public func productType(_ productId: String, transactions: [AccountTransaction]) -> ProductType {
        if let product = catalog[productId] { return product.type }
        return transactions.contains { $0.transaction.expiresDate != nil } ? .autoRenewable : .nonConsumable
    }

    /// The account's entitlements, one per product that grants anything, as of `now`.
    public func entitlements(accountId: String, receipts: [VerifiedFacts], now: Date) -> [Entitlement] {
        entitlements(accountId: accountId, receipts: receipts, union: Self.union(receipts), now: now)
    }

    /// The same, given `union(receipts)` already made.
    public func entitlements(accountId: String, receipts: [VerifiedFacts], union: [AccountTransaction], now: Date) -> [Entitlement] {
        let transactions = union.filter { sandboxPolicy == .allow || $0.environment != .sandbox }
        var renewals: [String: PendingRenewalInfo] = [:]
        for receipt in receipts where sandboxPolicy == .allow || receipt.environment != .sandbox {
            for info in receipt.renewals {
                if let original = info.originalTransactionId { renewals[original] = info }
            }
        }
        let byProduct = Dictionary(grouping: transactions, by: \.transaction.productId)
        // Signed data names each transaction's type: a consumable the catalog lacks grants nothing.
        let signedConsumables = Set(receipts.flatMap(\.consumableProducts))
        var result: [Entitlement] = []
        for productId in byProduct.keys.sorted() {
            let productTransactions = byProduct[productId]!
            let type = catalog[productId] == nil && signedConsumables.contains(productId)
                ? .consumable : productType(productId, transactions: productTransactions)
            let entitlement: Entitlement? = switch type {
            case .autoRenewable:
                autoRenewable(accountId, productId, productTransactions, renewals: renewals, receipts: receipts, now: now)
            case .nonConsumable:
                nonConsumable(accountId, productId, productTransactions)
            case .nonRenewing:
                nonRenewing(accountId, productId, productTransactions, now: now)
            case .consumable:
                nil  // ledger only
            }
            if let entitlement { result.append(entitlement) }
        }
        return result
    }

    /// The current transaction is the one with the greatest expiry, never the array's first or last.
    func autoRenewable(
        _ accountId: String, _ productId: String, _ transactions: [AccountTransaction],
        renewals: [String: PendingRenewalInfo], receipts: [VerifiedFacts], now: Date
    ) -> Entitlement {
        let current = transactions.max { left, right in
            let leftExpiry = left.transaction.expiresDate ?? .distantPast
            let rightExpiry = right.transaction.expiresDate ?? .distantPast
            if leftExpiry != rightExpiry { return leftExpiry < rightExpiry }
            let leftPurchase = left.transaction.purchaseDate ?? .distantPast
            let rightPurchase = right.transaction.purchaseDate ?? .distantPast
            if leftPurchase != rightPurchase { return leftPurchase < rightPurchase }
            return left.transaction.transactionId < right.transaction.transactionId
        }!
        let transaction = current.transaction
        // The renewal info of the current chain; answers that omit original_transaction_id
        // (seen in real ones) are matched by product when the account has just one such entry.
        let renewal = renewals[current.originalTransactionId] ?? Self.unkeyedRenewal(for: productId, in: receipts)
        var entitlement = Entitlement(
            accountId: accountId, productId: productId, originalTransactionId: current.originalTransactionId,
            latestTransactionId: transaction.transactionId, state: .expired, expiresAt: transaction.expiresDate,
            autoRenew: renewal?.autoRenewStatus, autoRenewProductId: renewal?.autoRenewProductId,
            environment: current.environment.rawValue, ownershipType: transaction.inAppOwnershipType)
        if let cancelled = transaction.cancellationDate {
            if transaction.isUpgraded == true {
                entitlement.state = .upgraded
            } else {
                entitlement.state = .refunded
                entitlement.refundedAt = cancelled
            }
        } else if let expires = transaction.expiresDate, expires > now {
            entitlement.state = .active
        } else if let grace = renewal?.gracePeriodExpiresDate, grace > now {
            entitlement.state = .gracePeriod
            entitlement.gracePeriodExpiresAt = grace
        } else if renewal?.isInBillingRetryPeriod == true {
            entitlement.state = .billingRetry
        } else {
            entitlement.state = .expired
        }
        return entitlement
    }

    static func unkeyedRenewal(for productId: String, in receipts: [VerifiedFacts]) -> PendingRenewalInfo? {
        let unkeyed = receipts.flatMap(\.renewals).filter {
            $0.originalTransactionId == nil && ($0.productId == productId || $0.autoRenewProductId == productId)
        }
        return unkeyed.count == 1 ? unkeyed[0] : nil
    }

    /// Active with no expiry while any purchase stands; refunded when every purchase was cancelled.
    func nonConsumable(_ accountId: String, _ productId: String, _ transactions: [AccountTransaction]) -> Entitlement {
        let standing = transactions.filter { $0.transaction.cancellationDate == nil }
        if let purchase = standing.last {  // transactions are sorted by purchase date
            return Entitlement(
                accountId: accountId, productId: productId, originalTransactionId: purchase.originalTransactionId,
                latestTransactionId: purchase.transaction.transactionId, state: .active,
                environment: purchase.environment.rawValue, ownershipType: purchase.transaction.inAppOwnershipType)
        }
        let refunded = transactions.max { ($0.transaction.cancellationDate ?? .distantPast) < ($1.transaction.cancellationDate ?? .distantPast) }!
        return Entitlement(
            accountId: accountId, productId: productId, originalTransactionId: refunded.originalTransactionId,
            latestTransactionId: refunded.transaction.transactionId, state: .refunded,
            environment: refunded.environment.rawValue, ownershipType: refunded.transaction.inAppOwnershipType,
            refundedAt: refunded.transaction.cancellationDate)
    }

    /// Expiry = purchase date + the catalog's duration; the purchase that lasts longest is current.
    func nonRenewing(_ accountId: String, _ productId: String, _ transactions: [AccountTransaction], now: Date) -> Entitlement {
        guard let duration = catalog[productId]?.duration else {
            return nonConsumable(accountId, productId, transactions)
        }
        func expiry(_ item: AccountTransaction) -> Date? {
            item.transaction.purchaseDate.map { duration.added(to: $0) }
        }
        let current = transactions.max { (expiry($0) ?? .distantPast) < (expiry($1) ?? .distantPast) }!
        var entitlement = Entitlement(
            accountId: accountId, productId: productId, originalTransactionId: current.originalTransactionId,
            latestTransactionId: current.transaction.transactionId, state: .expired, expiresAt: expiry(current),
            environment: current.environment.rawValue, ownershipType: current.transaction.inAppOwnershipType)
        if let cancelled = current.transaction.cancellationDate {
            entitlement.state = .refunded
            entitlement.refundedAt = cancelled
        } else if let expires = entitlement.expiresAt, expires > now {
            entitlement.state = .active
        }
        return entitlement
    }
}
