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
    /// Its money terms and its product's type, where signed data gave them.
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
            } else if candidateExpiry == existingExpiry, candidate.transaction.cancellationDate == existing.transaction.cancellationDate,
                      Self.sortKey(candidate) < Self.sortKey(existing) {
                // Two copies alike in expiry and cancellation (two devices' answers): one fixed
                // choice, so the order in which the answers came changes nothing.
                byId[candidate.transaction.transactionId] = candidate
            }
        }
        for receipt in receipts {
            for transaction in receipt.transactions {
                offer(AccountTransaction(
                    transaction: transaction, environment: receipt.environment(ofTransaction: transaction.transactionId),
                    fromLatestReceiptInfo: true, source: receipt.source, signed: receipt.signedTerms[transaction.transactionId]))
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

    /// A total order over copies of one transaction, for a choice that does not depend on order.
    static func sortKey(_ item: AccountTransaction) -> String {
        let t = item.transaction
        return [t.productId, t.originalTransactionId ?? "", t.isUpgraded.map { "\($0)" } ?? "", t.cancellationReason.map { "\($0)" } ?? "",
                t.inAppOwnershipType ?? "", item.environment.rawValue, item.source.rawValue, item.signed?.rawProductType ?? "",
                t.purchaseDate.map { "\($0.timeIntervalSince1970)" } ?? "", t.webOrderLineItemId ?? ""].joined(separator: "\u{1F}")
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

    /// The product's type: Apple's signed `type` where a transaction carries one (Apple knows what
    /// it sold), else the catalog's, else auto-renewable when a transaction has an expiry (Apple
    /// dates only subscriptions that way); nil when nothing says: such a product is left as stored.
    public func productType(_ productId: String, transactions: [AccountTransaction]) -> ProductType? {
        if let signed = Self.signedType(transactions) { return signed }
        if let product = catalog[productId] { return product.type }
        return transactions.contains { $0.transaction.expiresDate != nil } ? .autoRenewable : nil
    }

    /// Apple's signed `type` of the product, where a transaction carries one (one fixed pick
    /// should two disagree, so no order changes it).
    public static func signedType(_ transactions: [AccountTransaction]) -> ProductType? {
        transactions.lazy.compactMap({ $0.signed?.productType }).min(by: { $0.rawValue < $1.rawValue })
    }

    /// The account's entitlements, one per product that grants anything, as of `now`.
    public func entitlements(accountId: String, receipts: [VerifiedFacts], now: Date) -> [Entitlement] {
        decide(accountId: accountId, receipts: receipts, union: Self.union(receipts), now: now).entitlements
    }

    /// The same, given `union(receipts)` already made.
    public func entitlements(accountId: String, receipts: [VerifiedFacts], union: [AccountTransaction], now: Date) -> [Entitlement] {
        decide(accountId: accountId, receipts: receipts, union: union, now: now).entitlements
    }

    /// What the rules decided for one account: an entitlement per product they can judge, each
    /// with the chains that were judged for it, and the products they cannot judge.
    public struct Decision: Sendable, Equatable {
        public var entitlements: [Entitlement] = []
        /// Per product, every chain (or, for passes and one-time purchases, every purchase) as
        /// judged alone, the deciding one among them (`entitlements` holds it).
        public var judged: [String: [Entitlement]] = [:]
        /// Products left as stored, with why: no grant, no revoke (docs/guarantees.md, "Entitlement rules").
        public var leftAsStored: [String: String] = [:]
        /// Per product, the end of a grace period Apple's renewal entry gives for the deciding
        /// chain that has passed: the expiry lag holds a revoke after it as after an expiry.
        public var lapsedGraceEnds: [String: Date] = [:]
    }

    /// The account's decision (docs/guarantees.md, "Entitlement rules"): each chain judged alone
    /// with its own renewal entry, then the product's entitlement is the best of its chains.
    public func decide(accountId: String, receipts: [VerifiedFacts], union: [AccountTransaction], now: Date) -> Decision {
        let transactions = union.filter { sandboxPolicy == .allow || $0.environment != .sandbox }
        var renewals: [PendingRenewalInfo] = []
        for receipt in receipts {
            for info in receipt.renewals where sandboxPolicy == .allow || receipt.environment(of: info) != .sandbox {
                renewals.append(info)
            }
        }
        let byProduct = Dictionary(grouping: transactions, by: \.transaction.productId)
        let currentProducts = Self.currentProducts(transactions)
        var decision = Decision()
        for productId in byProduct.keys.sorted() {
            let productTransactions = byProduct[productId]!
            let judged: [Entitlement]
            switch productType(productId, transactions: productTransactions) {
            case .autoRenewable?:
                judged = Dictionary(grouping: productTransactions, by: \.originalTransactionId).keys.sorted().map { chain in
                    autoRenewableChain(accountId, productId, productTransactions.filter { $0.originalTransactionId == chain },
                                       renewal: currentProducts[chain] == productId
                                           ? Self.renewal(chain: chain, productId: productId, in: renewals) : nil,
                                       now: now)
                }
            case .nonConsumable?:
                judged = productTransactions.map { nonConsumablePurchase(accountId, productId, $0) }
            case .nonRenewing?:
                guard let duration = catalog[productId]?.duration else {
                    decision.leftAsStored[productId] = "a non-renewing subscription the catalog gives no duration: its expiry is unknown"
                    continue
                }
                let passes = nonRenewingPurchases(accountId, productId, productTransactions, duration: duration,
                                                  stacking: catalog[productId]?.passesStack ?? false, now: now)
                judged = passes  // each pass judged alone: the best of them decides
            case .consumable?:
                continue  // ledger only
            case nil:
                // A refund ends a purchase whatever its type: with every purchase of it refunded,
                // the product grants nothing, and a stored grant is revoked.
                guard productTransactions.allSatisfy({ $0.transaction.cancellationDate != nil }) else {
                    decision.leftAsStored[productId] = "neither the catalog nor Apple's signed type says what this product is"
                    continue
                }
                judged = productTransactions.map { nonConsumablePurchase(accountId, productId, $0) }
            }
            let purchased = Dictionary(productTransactions.map { ($0.transaction.transactionId, $0.transaction.purchaseDate ?? .distantPast) },
                                       uniquingKeysWith: { first, _ in first })
            guard let best = judged.max(by: { Self.isWorse($0, $1, purchased: purchased) }) else { continue }
            decision.entitlements.append(best)
            decision.judged[productId] = judged
            if best.state == .billingRetry || best.state == .expired, currentProducts[best.originalTransactionId] == productId,
               let grace = Self.renewal(chain: best.originalTransactionId, productId: productId, in: renewals)?.gracePeriodExpiresDate,
               grace <= now {
                decision.lapsedGraceEnds[productId] = grace
            }
        }
        return decision
    }

    /// Orders two judgements of one product: entitled beats not, then active > grace period >
    /// billing retry > the rest, then the later expiry (no expiry is later than any), then the
    /// later grace end, then the later purchase, then a fixed order by transaction id, so no input
    /// order changes the pick.
    static func isWorse(_ left: Entitlement, _ right: Entitlement, purchased: [String: Date]) -> Bool {
        func rank(_ state: EntitlementState) -> Int {
            switch state {
            case .active: 3
            case .gracePeriod: 2
            case .billingRetry: 1
            case .expired, .refunded, .upgraded: 0
            }
        }
        if rank(left.state) != rank(right.state) { return rank(left.state) < rank(right.state) }
        let (leftEnd, rightEnd) = (left.expiresAt ?? .distantFuture, right.expiresAt ?? .distantFuture)
        if leftEnd != rightEnd { return leftEnd < rightEnd }
        let (leftGrace, rightGrace) = (left.gracePeriodExpiresAt ?? .distantPast, right.gracePeriodExpiresAt ?? .distantPast)
        if leftGrace != rightGrace { return leftGrace < rightGrace }
        let leftPurchase = left.latestTransactionId.flatMap { purchased[$0] } ?? .distantPast
        let rightPurchase = right.latestTransactionId.flatMap { purchased[$0] } ?? .distantPast
        if leftPurchase != rightPurchase { return leftPurchase < rightPurchase }
        return (left.latestTransactionId ?? "", left.originalTransactionId) > (right.latestTransactionId ?? "", right.originalTransactionId)
    }

    /// One chain of an auto-renewable product, alone: its current transaction is the one with the
    /// greatest expiry (never the array's first or last); `is_upgraded` ends it whether or not a
    /// cancellation date comes with it.
    func autoRenewableChain(
        _ accountId: String, _ productId: String, _ transactions: [AccountTransaction], renewal: PendingRenewalInfo?, now: Date
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
        var entitlement = Entitlement(
            accountId: accountId, productId: productId, originalTransactionId: current.originalTransactionId,
            latestTransactionId: transaction.transactionId, state: .expired, expiresAt: transaction.expiresDate,
            autoRenew: renewal?.autoRenewStatus, autoRenewProductId: renewal?.autoRenewProductId,
            environment: current.environment.rawValue, ownershipType: transaction.inAppOwnershipType)
        if transaction.isUpgraded == true {
            entitlement.state = .upgraded
        } else if let cancelled = transaction.cancellationDate {
            entitlement.state = .refunded
            entitlement.refundedAt = cancelled
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

    /// The product each chain holds now: that of its transaction with the greatest expiry, an
    /// upgraded-away one aside (a yearly left for a monthly can still expire later).
    static func currentProducts(_ transactions: [AccountTransaction]) -> [String: String] {
        var current: [String: AccountTransaction] = [:]
        func later(_ left: AccountTransaction, _ right: AccountTransaction) -> Bool {
            let key = { (item: AccountTransaction) in
                (item.transaction.isUpgraded == true ? 0 : 1, item.transaction.expiresDate ?? .distantPast,
                 item.transaction.purchaseDate ?? .distantPast, item.transaction.transactionId)
            }
            let (a, b) = (key(left), key(right))
            return (a.0, a.1, a.2, a.3) > (b.0, b.1, b.2, b.3)
        }
        for item in transactions where item.transaction.expiresDate != nil {
            if let held = current[item.originalTransactionId], !later(item, held) { continue }
            current[item.originalTransactionId] = item
        }
        return current.mapValues(\.transaction.productId)
    }

    /// The renewal entry of one chain, for the product the chain holds now (the caller asks only
    /// for that one: a product the customer left by an upgrade, a downgrade or a crossgrade gets
    /// no entry, whatever its `product_id`/`auto_renew_product_id` say): the chain's own
    /// (`original_transaction_id`), else one without that key naming the product. Identical
    /// copies (two receipts' answers) are one; of different ones, the one that keeps access
    /// longest, so neither their order nor a stale copy revokes anyone.
    static func renewal(chain: String, productId: String, in renewals: [PendingRenewalInfo]) -> PendingRenewalInfo? {
        func key(_ info: PendingRenewalInfo) -> String? { info.originalTransactionId.flatMap { $0.isEmpty ? nil : $0 } }
        let own = renewals.filter { key($0) == chain }
        let candidates = own.isEmpty
            ? renewals.filter { key($0) == nil && ($0.productId == productId || $0.autoRenewProductId == productId) } : own
        return candidates.max { favour($0) < favour($1) }
    }

    /// Whether `entry` keeps access at least as long as `other` (the pick between two different
    /// entries of one chain), for whoever stores them.
    public static func isPreferred(_ entry: PendingRenewalInfo, over other: PendingRenewalInfo) -> Bool {
        !(favour(entry) < favour(other))
    }

    /// How long an entry keeps access, then a fixed order over every field.
    static func favour(_ info: PendingRenewalInfo) -> RenewalOrder {
        RenewalOrder(
            grace: info.gracePeriodExpiresDate ?? .distantPast, retrying: info.isInBillingRetryPeriod == true,
            text: [info.autoRenewStatus.map { "\($0)" } ?? "", info.autoRenewProductId ?? "", info.productId ?? "",
                   info.expirationIntent.map { "\($0)" } ?? "", info.priceConsentStatus.map { "\($0)" } ?? "",
                   info.originalTransactionId ?? ""].joined(separator: "\u{1F}"))
    }

    struct RenewalOrder: Comparable {
        var grace: Date
        var retrying: Bool
        var text: String
        static func < (left: Self, right: Self) -> Bool {
            if left.grace != right.grace { return left.grace < right.grace }
            if left.retrying != right.retrying { return !left.retrying }
            return left.text < right.text
        }
    }

    /// One purchase of a non-consumable: `active` with no expiry, or `refunded` when cancelled.
    func nonConsumablePurchase(_ accountId: String, _ productId: String, _ purchase: AccountTransaction) -> Entitlement {
        var entitlement = Entitlement(
            accountId: accountId, productId: productId, originalTransactionId: purchase.originalTransactionId,
            latestTransactionId: purchase.transaction.transactionId, state: .active,
            environment: purchase.environment.rawValue, ownershipType: purchase.transaction.inAppOwnershipType)
        if let cancelled = purchase.transaction.cancellationDate {
            entitlement.state = .refunded
            entitlement.refundedAt = cancelled
        }
        return entitlement
    }

    /// Each purchase of a pass, alone: it lasts the catalog's duration from its purchase (or, where
    /// the catalog says passes stack, from the end of the unrefunded passes bought before it); a
    /// refunded pass ends nothing but itself.
    func nonRenewingPurchases(
        _ accountId: String, _ productId: String, _ transactions: [AccountTransaction], duration: CalendarDuration, stacking: Bool,
        now: Date
    ) -> [Entitlement] {
        var runningEnd = Date.distantPast
        let ordered = transactions.sorted {
            ($0.transaction.purchaseDate ?? .distantPast, $0.transaction.transactionId)
                < ($1.transaction.purchaseDate ?? .distantPast, $1.transaction.transactionId)
        }
        return ordered.map { item in
            var start = item.transaction.purchaseDate
            if stacking, let purchased = start, item.transaction.cancellationDate == nil {
                start = max(purchased, runningEnd)
            }
            let end = start.map { duration.added(to: $0) }
            if stacking, item.transaction.cancellationDate == nil, let end { runningEnd = end }
            var entitlement = Entitlement(
                accountId: accountId, productId: productId, originalTransactionId: item.originalTransactionId,
                latestTransactionId: item.transaction.transactionId, state: .expired, expiresAt: end,
                environment: item.environment.rawValue, ownershipType: item.transaction.inAppOwnershipType)
            if let cancelled = item.transaction.cancellationDate {
                entitlement.state = .refunded
                entitlement.refundedAt = cancelled
            } else if let end, end > now {
                // A stacked pass that starts later grants too: the passes before it cover until then.
                entitlement.state = .active
            }
            return entitlement
        }
    }
}
