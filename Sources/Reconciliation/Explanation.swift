import AppStoreModels
import CivilCalendar
import Foundation

/// What the job stored about one account: the evidence `explain` shows (docs/explain.md).
public struct AccountEvidence: Sendable {
    /// One stored receipt and what the job last learned of it.
    public struct Receipt: Sendable, Equatable {
        public var id: Int64
        public var environment: String?
        public var lastStatus: Int?
        public var lastOutcome: String?
        public var lastVerifiedAt: Date?
        public var nextAttemptAt: Date?
        public var attempts: Int
        /// From the local decode of the blob; nil when it never decoded.
        public var localBundleId: String?
        public var localOriginalTransactionIds: [String]?
        /// What its last failed verification said (failures.csv's words); nil once it verified.
        public var lastFailure: ReceiptFailure?

        public init(id: Int64, environment: String?, lastStatus: Int?, lastOutcome: String?, lastVerifiedAt: Date?,
                    nextAttemptAt: Date?, attempts: Int, localBundleId: String?, localOriginalTransactionIds: [String]?,
                    lastFailure: ReceiptFailure? = nil) {
            self.lastFailure = lastFailure
            self.id = id
            self.environment = environment
            self.lastStatus = lastStatus
            self.lastOutcome = lastOutcome
            self.lastVerifiedAt = lastVerifiedAt
            self.nextAttemptAt = nextAttemptAt
            self.attempts = attempts
            self.localBundleId = localBundleId
            self.localOriginalTransactionIds = localOriginalTransactionIds
        }
    }

    /// One ledger row.
    public struct LedgerTransaction: Sendable, Equatable {
        public var transaction: Transaction
        public var environment: AppleEnvironment
        /// Who wrote it last: `verify_receipt`, `notification_v1`, `notification_v2`, `server_api`.
        public var source: String
        /// Apple's signed `type` of its product, where signed data gave one.
        public var rawSignedProductType: String?

        public init(transaction: Transaction, environment: AppleEnvironment, source: String, rawSignedProductType: String? = nil) {
            self.transaction = transaction
            self.environment = environment
            self.source = source
            self.rawSignedProductType = rawSignedProductType
        }
    }

    /// The renewal state Apple gave for one chain at the account's last full verification.
    public struct Renewal: Sendable, Equatable {
        public var environment: AppleEnvironment
        public var info: PendingRenewalInfo

        public init(environment: AppleEnvironment, info: PendingRenewalInfo) {
            self.environment = environment
            self.info = info
        }
    }

    /// A correction ever made to the account.
    public struct PastCorrection: Sendable, Equatable {
        public var runId: Int64
        /// When its run started.
        public var runStartedAt: Date?
        public var productId: String
        public var kind: Correction.Kind
        public var reason: String
        public var status: CorrectionStatus
        public var appliedAt: Date?
        /// Planned by a dry run: a plan to read, never to be applied.
        public var isDryRun: Bool

        public init(runId: Int64, runStartedAt: Date?, productId: String, kind: Correction.Kind, reason: String, status: CorrectionStatus,
                    appliedAt: Date?, isDryRun: Bool = false) {
            self.isDryRun = isDryRun
            self.runId = runId
            self.runStartedAt = runStartedAt
            self.productId = productId
            self.kind = kind
            self.reason = reason
            self.status = status
            self.appliedAt = appliedAt
        }
    }

    /// A server notification matched to the account.
    public struct NotificationRecord: Sendable, Equatable {
        public var id: Int64
        public var receivedAt: Date
        public var processedAt: Date?
        /// `v1 REFUND`, `v2 DID_RENEW/BILLING_RECOVERY`, `v2 (unverified)`.
        public var type: String
        public var outcome: String?
        public var reason: String?

        public init(id: Int64, receivedAt: Date, processedAt: Date?, type: String, outcome: String?, reason: String?) {
            self.id = id
            self.receivedAt = receivedAt
            self.processedAt = processedAt
            self.type = type
            self.outcome = outcome
            self.reason = reason
        }
    }

    public var accountId: String
    public var receipts: [Receipt]
    public var ledger: [LedgerTransaction]
    public var renewals: [Renewal]
    public var entitlements: [Entitlement]
    public var corrections: [PastCorrection]
    public var notifications: [NotificationRecord]
    /// When and why the account was set aside (docs/guarantees.md, "Hostile input"); nil when it is not.
    public var quarantine: Quarantine?
    /// Every quarantined notification, of any account: one was never matched, so any of them
    /// may concern this account.
    public var quarantinedNotificationIds: [Int64] = []
    /// The account's money events in the finance journal, in the order they happened.
    public var moneyEvents: [FinanceEvent] = []
    /// Apple's CONSUMPTION_REQUESTs for the account's transactions and their answers, newest first.
    public var consumptionAnswers: [ConsumptionAnswerRecord] = []

    /// An account set aside: verifying it stopped the process three times in a row.
    public struct Quarantine: Sendable, Equatable {
        public var since: Date
        public var reason: String

        public init(since: Date, reason: String) {
            self.since = since
            self.reason = reason
        }
    }

    public init(accountId: String, receipts: [Receipt] = [], ledger: [LedgerTransaction] = [], renewals: [Renewal] = [],
                entitlements: [Entitlement] = [], corrections: [PastCorrection] = [], notifications: [NotificationRecord] = []) {
        self.accountId = accountId
        self.receipts = receipts
        self.ledger = ledger
        self.renewals = renewals
        self.entitlements = entitlements
        self.corrections = corrections
        self.notifications = notifications
    }

    /// Nothing at all is stored about the account.
    public var isEmpty: Bool {
        receipts.isEmpty && ledger.isEmpty && entitlements.isEmpty && corrections.isEmpty && notifications.isEmpty
    }

    /// The stored evidence as the facts the rules read: the ledger and the renewal state, per
    /// environment. Every ledger row counts as Apple's current view of its transaction.
    public var facts: [VerifiedFacts] {
        AppleEnvironment.allCases.compactMap { environment in
            let rows = ledger.filter { $0.environment == environment }
            let renewals = renewals.filter { $0.environment == environment }.map(\.info)
            guard !rows.isEmpty || !renewals.isEmpty else { return nil }
            var facts = VerifiedFacts(receiptId: nil, transactions: rows.map(\.transaction), renewals: renewals, environment: environment,
                                      source: .verifyReceipt)
            for row in rows where row.rawSignedProductType != nil {
                facts.signedTerms[row.transaction.transactionId] = SignedTerms(rawProductType: row.rawSignedProductType)
            }
            return facts
        }
    }
}

/// Whether a run may correct the account (docs/guarantees.md, "Entitlement rules"): only an account all of whose
/// receipts verified gets corrections; for the others nothing changes, whatever the failure. So
/// `explain` never announces a change for an account that is not verified.
public enum AccountStanding: Sendable, Equatable {
    /// Every receipt verified at its last attempt: a run corrects what differs.
    case verified
    /// Some receipt's last verification failed, or it was never sent to Apple: no run changes the
    /// account's entitlements until every receipt verifies.
    case unverified(failing: [AccountEvidence.Receipt], neverSent: [AccountEvidence.Receipt])
    /// No receipt is stored: no run verifies the account, so none changes its entitlements.
    case noReceipts

    public init(receipts: [AccountEvidence.Receipt]) {
        guard !receipts.isEmpty else {
            self = .noReceipts
            return
        }
        let neverSent = receipts.filter { $0.lastOutcome == nil && $0.lastVerifiedAt == nil }
        let failing = receipts.filter { $0.lastOutcome != nil && $0.lastOutcome != ReceiptOutcome.verified.rawValue }
        self = failing.isEmpty && neverSent.isEmpty ? .verified : .unverified(failing: failing, neverSent: neverSent)
    }

    public var allowsCorrections: Bool { self == .verified }
}

/// Support's answer for one product, in words: whether the customer has access now (the stored
/// row is what the app reads), until or since when, and why, with every code given its meaning.
public struct Verdict: Sendable, Equatable {
    public var hasAccess: Bool
    /// `ACCESS until 2026-11-29 10:00 UTC (billing grace period: ...)`, `NO ACCESS since ... (refunded, reason 1: an issue in the app)`.
    public var text: String

    public init(hasAccess: Bool, text: String) {
        self.hasAccess = hasAccess
        self.text = text
    }
}

/// One product's decision, re-made from the stored evidence by the run's own rules and diff.
public struct ProductDecision: Sendable, Equatable {
    public var productId: String
    /// Access now, from the stored row.
    public var verdict: Verdict
    public var type: ProductType
    /// Where the type came from: `catalog`, or the rule's guess from the transactions.
    public var typeFrom: String
    /// The rules' entitlement as of the explanation's time; nil for a consumable (ledger only)
    /// or a product no stored transaction supports.
    public var decided: Entitlement?
    /// The stored `iap.entitlements` row.
    public var stored: Entitlement?
    /// Why, line by line: the transaction chosen and the rule that decided the state.
    public var why: [String]
    /// What the next run that verifies the account in full, with Apple saying the same, would
    /// change (nil: the stored row already agrees, or the account is not verified and no run
    /// changes it).
    public var nextRun: Correction?
    /// The next run's revoke waits for the expiry lag.
    public var heldByExpiryLag: Bool
}

/// Re-decides an account's entitlements from what the job stored, with the same pure rules and
/// diff the run uses: never a second copy of the rules.
public enum Explanation {
    public static func decisions(_ evidence: AccountEvidence, rules: EntitlementRules, diff: EntitlementDiff, now: Date)
        -> [ProductDecision]
    {
        let standing = AccountStanding(receipts: evidence.receipts)
        let facts = evidence.facts
        let union = EntitlementRules.union(facts)
        let decision = rules.decide(accountId: evidence.accountId, receipts: facts, union: union, now: now)
        let decided = decision.entitlements
        let plan = diff.corrections(stored: evidence.entitlements, computed: decided, now: now,
                                    cancellationReasons: EntitlementRules.cancellationReasons(union),
                                    leftAsStored: Set(decision.leftAsStored.keys), lapsedGraceEnds: decision.lapsedGraceEnds)
        let products = Set(evidence.ledger.map(\.transaction.productId)).union(evidence.entitlements.map(\.productId))
        return products.sorted().map { productId in
            let transactions = union.filter { $0.transaction.productId == productId }
            let considered = transactions.filter { rules.sandboxPolicy == .allow || $0.environment != .sandbox }
            let stored = evidence.entitlements.first { $0.productId == productId }
            let (type, typeFrom) = productType(productId, transactions: considered.isEmpty ? transactions : considered, stored: stored,
                                               rules: rules)
            let entitlement = decided.first { $0.productId == productId }
            let held = standing.allowsCorrections ? plan.heldRevokes.first { $0.productId == productId } : nil
            var why = reasons(entitlement, type: type, transactions: considered, renewals: facts.flatMap(\.renewals), now: now)
            if let judged = decision.judged[productId], judged.count > 1, let entitlement {
                why.insert(contentsOf: chainLines(judged, deciding: entitlement, type: type), at: 0)
            }
            if let unjudged = decision.leftAsStored[productId] {
                why = ["\(unjudged): left as stored, no grant and no revoke (add the product to iap.products)"]
            }
            if transactions.isEmpty, !standing.allowsCorrections, type != .consumable {
                why = ["no transaction of this product is stored: the account's receipts have not all verified, so nothing is known yet"]
            }
            if considered.count < transactions.count {
                why.append("\(transactions.count - considered.count) sandbox transaction(s) ignored (--sandbox deny)")
            }
            if held != nil {
                why.append("the expiry passed less than the expiry lag (\(Int(diff.expiryLag))s) ago: the revoke waits for a later run")
            }
            return ProductDecision(
                productId: productId, verdict: verdict(stored: stored, type: type, evidence: evidence, now: now), type: type,
                typeFrom: typeFrom, decided: entitlement, stored: stored, why: why,
                nextRun: standing.allowsCorrections ? plan.corrections.first { $0.productId == productId } ?? held : nil,
                heldByExpiryLag: held != nil)
        }
    }

    /// Apple's signed type, else the catalog's; else the rules' guess from the transactions; else,
    /// with none stored, from the stored row (an expiry means a subscription): never
    /// `non_consumable` for a row that expires.
    static func productType(_ productId: String, transactions: [AccountTransaction], stored: Entitlement?,
                            rules: EntitlementRules) -> (ProductType, String) {
        if let signed = EntitlementRules.signedType(transactions) { return (signed, "Apple's signed type") }
        if let product = rules.catalog[productId] { return (product.type, "catalog") }
        if let guessed = rules.productType(productId, transactions: transactions) { return (guessed, "guessed from the transactions") }
        guard let stored else { return (.nonConsumable, "unknown: nothing is stored") }
        return (stored.expiresAt != nil ? .autoRenewable : .nonConsumable, "guessed from the stored row (no transaction is stored)")
    }

    /// `2026-11-29 10:00 UTC`: a moment as support reads it out.
    public static func moment(_ date: Date) -> String {
        let text = Timestamp.format(date)
        return "\(text.prefix(10)) \(text.dropFirst(11).prefix(5)) UTC"
    }

    /// Access now as the stored row grants it (`entitled` follows its state), with the state's reason in words.
    static func verdict(stored: Entitlement?, type: ProductType, evidence: AccountEvidence, now: Date) -> Verdict {
        func at(_ date: Date?) -> String { date.map(moment) ?? "an unknown time" }
        guard let stored else {
            return type == .consumable
                ? Verdict(hasAccess: false, text: "no entitlement: a consumable (the ledger only)")
                : Verdict(hasAccess: false, text: "NO ACCESS (no entitlement row)")
        }
        let latest = evidence.ledger.first { $0.transaction.transactionId == stored.latestTransactionId }?.transaction
        let renewal = evidence.renewals.first { $0.info.originalTransactionId == stored.originalTransactionId }?.info
        let intent = renewal?.expirationIntent.map { "; expiration intent \($0): \(AppleCodes.expirationIntent($0))" } ?? ""
        switch stored.state {
        case .active:
            guard let expires = stored.expiresAt else {
                return Verdict(hasAccess: true, text: "ACCESS with no expiry (\(type == .nonConsumable ? "a one-time purchase" : "no expiry stored"))")
            }
            let what = switch type {
            case .autoRenewable: "subscription active" + (stored.autoRenew.map { $0 ? ", auto-renew on" : ", auto-renew off: it ends then" } ?? "")
            case .nonRenewing: "non-renewing pass"
            default: "active"
            }
            return expires > now
                ? Verdict(hasAccess: true, text: "ACCESS until \(at(expires)) (\(what))")
                : Verdict(hasAccess: true, text: "ACCESS, though the stored expiry \(at(expires)) has passed (stored as active; "
                          + "the next verification decides)")
        case .gracePeriod:
            return Verdict(hasAccess: true, text: "ACCESS until \(at(stored.gracePeriodExpiresAt ?? stored.expiresAt)) (billing grace period: "
                           + "the renewal due \(at(stored.expiresAt)) failed, and Apple is retrying the payment)")
        case .refunded:
            let reason = latest?.cancellationReason.map { ", reason \($0): \(AppleCodes.cancellationReason($0))" } ?? ""
            return Verdict(hasAccess: false, text: "NO ACCESS since \(at(stored.refundedAt ?? latest?.cancellationDate)) (refunded\(reason))")
        case .upgraded:
            return Verdict(hasAccess: false, text: "NO ACCESS to this product since \(at(latest?.cancellationDate)) (upgraded: "
                           + "the customer moved to a higher product of the same subscription group)")
        case .billingRetry:
            return Verdict(hasAccess: false, text: "NO ACCESS since \(at(stored.expiresAt)) (billing retry: the renewal payment failed "
                           + "and Apple is still trying to bill\(intent))")
        case .expired:
            return Verdict(hasAccess: false, text: "NO ACCESS since \(at(stored.expiresAt)) (expired\(intent))")
        }
    }
}
