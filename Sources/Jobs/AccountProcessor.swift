import AppStore
import AppStoreModels
import CivilCalendar
import Foundation
import Locking
import Reconciliation
import Storage
import Throttling

/// What the writer commits for one account: receipt rows, ledger rows, planned corrections,
/// and the counts and failure lines of the report.
struct AccountResult: Sendable {
    var accountId: String
    var counts: AccountOutcomeCounts
    var receiptUpdates: [ReceiptUpdate]
    var ledger: [LedgerEntry]
    /// The account's renewal state to store with its ledger; nil leaves the stored one.
    var renewals: [RenewalEntry]?
    var corrections: [Correction]
    var failures: [FailureRecord]
    /// `--source both`: where the sources disagreed.
    var disagreements: [Disagreement] = []
}

/// Verifies one account's receipts with Apple and plans its corrections: the run's per-account
/// work, with no database access (the writer commits what it returns).
struct AccountProcessor: Sendable {
    let source: any AppleAccountSource
    let options: RunOptions
    let rules: EntitlementRules
    let diff: EntitlementDiff
    /// Which accounts' first rows that grant nothing are revokes (docs/adoption.md, "The first night").
    let adoption: Adoption
    /// The run's clock: one `now` for every decision.
    let now: Date

    /// The account's result; nil when the task was cancelled meanwhile (its answers may be
    /// cancelled requests, not Apple's word): nothing is written, and the account stays due.
    func process(_ work: AccountWork) async -> AccountResult? {
        TestFault.dieIfPoison(accountId: work.accountId)
        let answer = await source.verify(work)
        if Task.isCancelled { return nil }
        var counts = AccountOutcomeCounts(outcome: .verified)
        counts.bundleMismatches = answer.bundleMismatches
        counts.disagreements = answer.disagreements
        counts.otherSourceFailed = answer.otherSourceFailed
        counts.appleRequests = answer.otherSourceRequests
        return result(work, verifications: answer.verifications, counts: counts, otherSignedTerms: answer.otherSignedTerms)
    }

    /// The result of an account set aside (docs/guarantees.md, "Hostile input"): every receipt failed unread, as
    /// an oversize one is, so nothing is decoded, sent or planned, and nothing is revoked.
    func quarantined(_ work: AccountWork, reason: String) -> AccountResult {
        var counts = AccountOutcomeCounts(outcome: .failed)
        counts.quarantined = "account \(work.accountId): \(reason)"
        let verifications = work.receipts.map {
            ReceiptVerification(receipt: $0, local: $0.storedLocalDecode,
                                outcome: VerificationOutcome(result: .quarantined(reason: reason), environment: $0.environment))
        }
        return result(work, verifications: verifications, counts: counts)
    }

    /// The account's result from its receipts' verifications. Synchronous and not inlined: work
    /// inlined into `process` can widen the async frame each account in flight holds.
    @inline(never)
    private func result(_ work: AccountWork, verifications: [ReceiptVerification], counts: AccountOutcomeCounts,
                        otherSignedTerms: [String: SignedTerms] = [:]) -> AccountResult {
        var verified: [VerifiedFacts] = []
        var updates: [ReceiptUpdate] = []
        var failures: [FailureRecord] = []
        var receiptOutcomes: [ReceiptOutcome] = []
        var counts = counts
        for verification in verifications {
            let (receipt, outcome) = (verification.receipt, verification.outcome)
            // A receipt that keeps failing the same way may be set aside instead (`PersistentFailure`): a failure.
            let malformed = PersistentFailure.malformedInARow(outcome: outcome.receiptOutcome, status: outcome.finalStatus, before: receipt.malformedRuns)
            let persistence = PersistentFailure.decide(
                outcome: outcome.receiptOutcome, status: outcome.finalStatus, malformedInARow: malformed, policy: options.persistentFailure)
            let receiptOutcome: ReceiptOutcome = persistence == .retry ? outcome.receiptOutcome : .failed
            if verification.local == nil && outcome.receiptOutcome != .quarantined { counts.receiptsNotDecodedLocally += 1 }
            receiptOutcomes.append(receiptOutcome)
            counts.receipts[receiptOutcome, default: 0] += 1
            counts.appleRequests += outcome.requests
            if let status = outcome.finalStatus { counts.appleStatuses[String(status), default: 0] += 1 }
            if outcome.receiptOutcome == .verified {
                // A source that verifies a whole account gives its facts once, with its first receipt.
                if let facts = verification.facts { verified.append(facts) }
            }
            var update = update(after: verification, counts: &counts)
            update.malformedRuns = malformed
            if outcome.receiptOutcome != .verified {
                var reason = outcome.reason ?? ""
                if case .setAside(let why, let period) = persistence {
                    (reason, update.outcome, update.nextAttemptAt) = (why + ": " + reason, .failed, now.addingTimeInterval(period))
                }
                // One failure, told twice in the same words: failures.csv now, the receipt row for `explain` later.
                let failure = ReceiptFailure(reason: reason, attempts: outcome.attempts,
                                             endpoints: outcome.endpoints.map(\.rawValue).joined(separator: ">"))
                failures.append(FailureRecord(
                    accountId: work.accountId, receiptId: receipt.id, outcome: update.outcome, appleStatus: outcome.finalStatus,
                    attempts: failure.attempts, endpoints: failure.endpoints, reason: failure.reason))
                update.failure = failure
            }
            updates.append(update)
        }
        counts.outcome = AccountOutcome.combining(receiptOutcomes)
        return plan(work, verified: verified, updates: updates, failures: failures, counts: counts, otherSignedTerms: otherSignedTerms)
    }

    /// The ledger rows and corrections of an account, from its verified receipts. Only accounts
    /// all of whose receipts verified get corrections: a partial view could revoke wrongly.
    private func plan(_ work: AccountWork, verified: [VerifiedFacts], updates: [ReceiptUpdate], failures: [FailureRecord],
                      counts: AccountOutcomeCounts, otherSignedTerms: [String: SignedTerms]) -> AccountResult {
        var (updates, counts) = (updates, counts)
        let union = EntitlementRules.union(verified)
        // The answers' own time (docs/database.md, "The ledger"), not the run's start: a word is
        // as late as Apple gave it, and a reversal it shows belongs to that day.
        let answeredAt = Date()
        var ledger = union.map {
            let signed = $0.signed ?? otherSignedTerms[$0.transaction.transactionId]
            return LedgerEntry(
                accountId: work.accountId, transaction: $0.transaction, environment: $0.environment, source: LedgerSource($0.source),
                signed: signed, asOf: isCurrent($0, signed: signed) ? $0.signed?.signedDate ?? answeredAt : nil)
        }
        let isVerified = counts.outcome == .verified && !work.receipts.isEmpty
        // Rows the account's last full verification already wrote are not sent again, within
        // the account's ledger refresh window (a backfill rewrites them all). Only a full
        // verification records a digest; anything less clears it.
        let window = options.ledgerRefresh.window(accountId: work.accountId, at: now)
        var renewals: [RenewalEntry]? = isVerified ? RenewalEntry.of(verified, accountId: work.accountId) : nil
        let digest = isVerified ? LedgerEntry.digest(ledger, renewals: renewals ?? [], refreshWindow: window ?? 0) : nil
        let originals = isVerified ? Array(Set(union.map(\.originalTransactionId))).sorted() : nil
        for index in updates.indices {
            updates[index].ledgerDigest = digest
            updates[index].ledgerOriginalTransactionIds = originals
        }
        if let digest, window != nil, options.kind != .backfill, work.receipts.allSatisfy({ $0.ledgerDigest == digest }) {
            ledger = []
            renewals = nil
        }
        var corrections: [Correction] = []
        if isVerified {
            let decision = rules.decide(accountId: work.accountId, receipts: verified, union: union, now: now)
            var diff = self.diff
            diff.isFirstNight = adoption.countsFirstRowAsLoss(accountStoredAt: work.receipts.compactMap(\.storedAt).min())
            let plan = diff.corrections(stored: work.stored, computed: decision.entitlements, now: now,
                                        cancellationReasons: EntitlementRules.cancellationReasons(union),
                                        leftAsStored: Set(decision.leftAsStored.keys), lapsedGraceEnds: decision.lapsedGraceEnds)
            counts.productsLeftAsStored = decision.leftAsStored.keys.sorted().map {
                "account \(work.accountId), product \($0): \(decision.leftAsStored[$0]!); left as stored (no grant, no revoke)"
            }
            corrections = plan.corrections
            counts.corrections = plan.corrections.map(\.kind)
            counts.heldRevokes = plan.heldRevokes.count
            counts.sandboxGrants = plan.corrections.filter { $0.kind == .grant && $0.after.environment == "Sandbox" }.count
        }
        return AccountResult(accountId: work.accountId, counts: counts, receiptUpdates: updates, ledger: ledger,
                             renewals: renewals, corrections: corrections, failures: failures, disagreements: counts.disagreements)
    }

    /// Whether an answer's copy of a transaction is Apple's current word on its cancellation, so
    /// that one without a cancellation clears a refund. Signed data says it in every environment.
    /// verifyReceipt's `latest_receipt_info` does, except where Apple never shows a refund there
    /// (a consumable's, a sandbox one's); `receipt.in_app` is the receipt's own, perhaps old, copy.
    private func isCurrent(_ item: AccountTransaction, signed: SignedTerms?) -> Bool {
        if item.source == .serverAPI { return true }
        let consumable = (signed?.productType ?? rules.catalog[item.transaction.productId]?.type) == .consumable
        return item.fromLatestReceiptInfo && item.environment == .production && !consumable
    }

    /// What the run writes back to a receipt row after its verification: what Apple said, the
    /// local decode, and when to try again.
    private func update(after verification: ReceiptVerification, counts: inout AccountOutcomeCounts) -> ReceiptUpdate {
        let (receipt, outcome, local) = (verification.receipt, verification.outcome, verification.local)
        // A status past an integer column's range is an unknown code (a final failure) that
        // `last_status` cannot hold: the row keeps NULL, the report has the number.
        let storableStatus = outcome.finalStatus.flatMap { StorableValues.outOfRange($0, field: "") == nil ? $0 : nil }
        var update = ReceiptUpdate(
            id: receipt.id, rowVersion: receipt.rowVersion, environment: outcome.environment, verifiedAt: nil,
            status: storableStatus, nextAttemptAt: nil, attempts: receipt.attempts + 1, outcome: outcome.receiptOutcome,
            latestReceipt: nil)
        if let local, StorableValues.problem(in: local) == nil {
            update.localBundleId = local.bundleId
            update.localOriginalTransactionIds = local.originalTransactionIds
            update.localDecodeDigest = receipt.blobDigest
        }
        switch outcome.result {
        case .verified, .verifiedSignedData:
            update.attempts = 0
            update.verifiedAt = now
            // Apple sends the receipt it was sent back, most nights: nothing to check or store.
            guard let fresh = verification.freshReceipt, fresh != receipt.latestReceipt else { break }
            if case .success(let compact) = ReceiptBlob.normalized(fresh, maximumBytes: options.policy.maximumReceiptBytes) {
                if compact != withoutWhitespace(receipt.latestReceipt) {
                    update.latestReceipt = compact
                    counts.latestReceiptsStored += 1
                }
            } else {
                counts.latestReceiptsIgnored += 1
            }
        case .notSent:
            // Never sent: Apple said stop (a 401, the 21004 stop). No attempt spent; due again at once.
            update.attempts = receipt.attempts
        case .deferred:
            update.nextAttemptAt = now.adding(options.deferral.ceiling(afterAttempt: receipt.attempts + 1))
        case .failed(let status, _):
            // A rejected secret is this job's configuration, not the receipt: try it again next run.
            update.nextAttemptAt = status == 21004 ? nil : now.adding(options.failedRetryAfter)
        case .invalidReceipt, .foreignBundle:
            update.nextAttemptAt = now.adding(options.failedRetryAfter)
        case .quarantined:
            // Not an attempt, and due again next run: every night's report lists it until released.
            update.attempts = receipt.attempts
        }
        return update
    }
}

/// Many 21004 answers in a row mean the shared secret is wrong: the run stops (exit 2) instead
/// of failing every receipt. Counted across the run's concurrent accounts. Once tripped, it stops
/// every request to Apple not yet sent (`AppleStop`), not only the accounts not yet started.
final class SharedSecretGuard: Sendable {
    private let state = Locked((consecutive: 0, total: 0))
    /// Set when the App Store Server API refused the key (HTTP 401): the run stops at once.
    private let unauthorized = Locked<String?>(nil)
    private let appleStop: AppleStop?

    func noteUnauthorized(_ reason: String) {
        unauthorized.withLock { $0 = $0 ?? reason }
        appleStop?.stop(because: reason)
    }

    /// Why the API refused the key, once it did.
    var unauthorizedReason: String? { unauthorized.withLock { $0 } }
    /// Consecutive 21004 answers that stop the run.
    let limit: Int

    init(limit: Int, appleStop: AppleStop? = nil) {
        self.limit = limit
        self.appleStop = appleStop
    }

    func note(_ status: Int?) {
        guard let status else { return }
        let tripped = state.withLock { state in
            if status == 21004 {
                state.consecutive += 1
                state.total += 1
            } else {
                state.consecutive = 0
            }
            return state.consecutive >= limit ? state.total : nil
        }
        if let tripped { appleStop?.stop(because: SharedSecretRejected(count: tripped).description) }
    }

    /// True once the limit is reached in a row; or when a small run saw nothing but 21004 (three at least).
    func hasRejected(accountsVerified: Int) -> Bool {
        unauthorizedReason != nil || state.withLock { $0.consecutive >= limit || ($0.total >= 3 && accountsVerified == 0) }
    }

    var isTripped: Bool { unauthorizedReason != nil || state.withLock { $0.consecutive >= limit } }
    var total: Int { state.withLock { $0.total } }
}
