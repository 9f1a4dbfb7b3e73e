import AppStore
import AppStoreModels
import Foundation
import Logging
import Reconciliation
import SignedData
import Storage
import Throttling

/// Answers Apple's CONSUMPTION_REQUESTs (docs/consumption.md), in four steps:
///
/// 1. reads Get Notification History for the requests of the last 13 hours (CONSUMPTION_REQUEST
///    only), storing each as an ingested notification would be, so that one the app server
///    missed is still answered in time;
/// 2. verifies each stored V2 notification no answering process examined yet, and records every
///    CONSUMPTION_REQUEST among them in `iap.consumption_answers` with its decision: the body to
///    send, or why nothing is sent; requests `unmatched` before their deadline are examined again;
/// 3. turns the pending answers whose deadline passed `past_deadline` (or `failed`);
/// 4. sends each pending answer, decided again on facts read in the transaction that marks it
///    `sending` (consent above all), committed before the request leaves: what leaves is what held
///    then, and a process killed in between never sends it twice.
public struct ConsumptionAnswering: Sendable {
    public var store: ConsumptionStore
    public var notifications: NotificationStore
    public var verifier: SignedDataVerifier
    /// Apple's Server API: notification history and the answers. Nil only in a dry run without
    /// the key (nothing is sent in a dry run, whatever this is).
    public var client: ServerAPIClient?
    public var policy: ConsumptionPolicy
    /// Stored notifications older than this are not examined: their 12 hours are long over.
    public var lookBack: TimeInterval
    /// The pause between two attempts of one answer.
    public var backoff = ConsumptionAnswering.defaultBackoff
    public var logger: Logger

    /// Read from Get Notification History: a little more than the 12 hours a request waits.
    static let historyWindow: TimeInterval = 13 * 3600
    /// Candidates read per page.
    static let pageSize = 500

    public init(store: ConsumptionStore, notifications: NotificationStore, verifier: SignedDataVerifier, client: ServerAPIClient?,
                policy: ConsumptionPolicy, lookBack: TimeInterval, logger: Logger) {
        self.store = store
        self.notifications = notifications
        self.verifier = verifier
        self.client = client
        self.policy = policy
        self.lookBack = lookBack
        self.logger = logger
    }

    /// Apple refused the App Store Connect key (401): the run stops; what it recorded stays pending.
    public struct Unauthorized: Error, CustomStringConvertible {
        public var description: String
    }

    /// One pass. A dry run records nothing and sends nothing: `show` gets each body that would leave.
    public func run(now: Date, dryRun: Bool, show: @Sendable (String) -> Void) async throws -> ConsumptionSummary {
        var summary = ConsumptionSummary()
        summary.dryRun = dryRun
        if !dryRun {
            let interrupted = try await store.failInterrupted()
            if interrupted > 0 {
                summary.outcomes[.failed, default: 0] += interrupted
                logger.error("consumption.interrupted", metadata: ["consumption.count": .stringConvertible(interrupted)])
            }
        }
        let unstored = try await readHistory(now: now, dryRun: dryRun, summary: &summary)
        try await examine(now: now, dryRun: dryRun, unstored: unstored, summary: &summary, show: show)
        if dryRun {
            try await showPending(show: show)
        } else {
            try await expire(summary: &summary, countedPending: [])
            try await sendPending(summary: &summary)
        }
        summary.oldestOpenRequest = try await store.oldestOpenRequest(now: now)
        summary.finishedAt = Date()
        return summary
    }

    /// Step 1: the requests Apple sent lately, stored once by their notificationUUID; in a dry
    /// run stored nowhere, returned to be examined with the stored ones.
    private func readHistory(now: Date, dryRun: Bool, summary: inout ConsumptionSummary) async throws -> [String] {
        guard let client else {
            summary.warnings.append("notification history not read: no App Store Connect key (a dry run goes on from what is stored)")
            return []
        }
        var unstored: [String] = []
        for environment in [AppleEnvironment.production, .sandbox] {
            var token: String?
            pages: for _ in 0..<NotificationHistoryFeed.maximumPages {
                let page = await client.notificationHistory(
                    start: now.addingTimeInterval(-Self.historyWindow), end: now, environment: environment, paginationToken: token,
                    notificationType: NotificationTypeV2.consumptionRequest.rawValue)
                switch page.result {
                case .failure(.unauthorized(let reason)):
                    throw Unauthorized(description: reason)
                case .failure(let failure):
                    let why = "notification history (\(environment.rawValue)) not read: \(NotificationHistoryFeed.describe(failure))"
                    summary.warnings.append(why)
                    // Apple out of reach for the customers' own environment; not a 429 (the quota is the
                    // app server's too: waiting is right), nor the sandbox's flakiness.
                    if environment == .production && !page.throttled { summary.appleUnreachable.append(why) }
                    logger.warning("consumption.history_unread", metadata: ["consumption.reason": "\(why)"])
                    break pages
                case .success(let answer):
                    let bodies = answer.signedPayloads.map(NotificationHistoryFeed.body)
                    if dryRun {
                        unstored += bodies
                    } else {
                        summary.fromHistory += try await notifications.insert(bodies: bodies, byUUIDOnly: true)
                    }
                    guard answer.hasMore, let next = answer.paginationToken, next != token else { break pages }
                    token = next
                }
            }
        }
        return unstored
    }

    /// Step 2: every stored V2 notification not examined yet, verified; each request recorded.
    /// Then the requests left `unmatched`, or `no_consent` for want of a row, whose deadline is
    /// ahead, decided again. In a dry run
    /// also the requests read from Apple's history and not stored here.
    private func examine(
        now: Date, dryRun: Bool, unstored: [String], summary: inout ConsumptionSummary, show: @Sendable (String) -> Void
    ) async throws {
        var after: (Date, Int64)?
        while true {
            let page = try await store.unexamined(since: now.addingTimeInterval(-lookBack), after: after, limit: Self.pageSize)
            guard let last = page.last else { break }
            after = (last.receivedAt, last.id)
            var notRequests: [Int64] = []
            for pending in page {
                summary.examined += 1
                let rejected = summary.rejected
                guard let request = try await request(of: pending, summary: &summary) else {
                    // One that did not verify stays unexamined: a fixable configuration (a missing
                    // app Apple ID) may be what refused it, and it is examined again until --look-back.
                    if summary.rejected == rejected { notRequests.append(pending.id) }
                    continue
                }
                summary.requests += 1
                let (facts, decision) = try await judge(request, now: now, dryRun: dryRun)
                if dryRun {
                    report(request, facts, decision, dryRun: true, summary: &summary, show: show)
                    continue
                }
                let recorded = try await store.record(request.request, notificationId: pending.id, facts: facts, decision: decision, now: now)
                if recorded != nil { report(request, facts, decision, dryRun: false, summary: &summary, show: show) }
            }
            if !dryRun { try await store.markExamined(notRequests, now: now) }
        }
        for body in unstored {
            let pending = NotificationStore.Pending(id: 0, receivedAt: now, body: body)
            guard let request = try await request(of: pending, summary: &summary),
                  try await !notifications.isStored(notificationUUID: request.request.notificationUUID) else { continue }
            summary.examined += 1
            summary.requests += 1
            let (facts, decision) = try await judge(request, now: now, dryRun: true)
            report(request, facts, decision, dryRun: true, summary: &summary, show: show)
        }
        for undecided in try await store.undecided(now: now) {
            guard let request = try await request(of: undecided.notification, summary: &summary) else { continue }
            let (facts, decision) = try await judge(request, now: now, dryRun: dryRun)
            // The same want as before changes nothing, unless a holder now said no: then it is final.
            if decision.outcome == undecided.outcome && decision.missingConsent == undecided.why && !facts.anyDeclined { continue }
            if dryRun {
                report(request, facts, decision, dryRun: true, summary: &summary, show: show)
            } else {
                try await store.decideAgain(undecided.id, facts: facts, decision: decision)
                if case .send = decision { summary.rematched += 1 }
                report(request, facts, decision, dryRun: false, summary: &summary, show: show)
            }
        }
    }

    /// The facts and the decision for one verified request. A transaction its holders' ledger does
    /// not show yet (a renewal bought since the last run) is first written to the ledger from the
    /// request's own verified transaction, as the notification's processing would, and judged
    /// then; a dry run writes nothing and judges as if it had.
    private func judge(_ verified: VerifiedRequest, now: Date, dryRun: Bool) async throws -> (ConsumptionFacts, ConsumptionDecision) {
        var facts = try await store.facts(for: verified.request, now: now)
        // Written only under a holder Apple's verified word names: a stored receipt's own decode is
        // what the device sent, and never puts a purchase in an account's ledger.
        if !facts.inLedger, let holder = facts.holders.first(where: \.verified)?.accountId, !verified.request.isAdvancedCommerce {
            if dryRun {
                facts.inLedger = true
            } else {
                try await notifications.recordInLedger(verified.ledgerEntry(accountId: holder, now: now), holders: facts.holders.map(\.accountId), now: now)
                logger.info("consumption.learned", metadata: [
                    "consumption.transaction_id": "\(verified.request.transactionId)", "consumption.account": "\(holder)",
                ])
                facts = try await store.facts(for: verified.request, now: now)
            }
        }
        return (facts, ConsumptionDecision.decide(verified.request, facts, policy: policy, now: now))
    }

    /// Counts, logs and (in a dry run) shows one decision.
    private func report(
        _ verified: VerifiedRequest, _ facts: ConsumptionFacts, _ decision: ConsumptionDecision, dryRun: Bool,
        summary: inout ConsumptionSummary, show: @Sendable (String) -> Void
    ) {
        let request = verified.request
        summary.count(decision, countPending: dryRun)
        logger.info("consumption.request", metadata: [
            "consumption.transaction_id": "\(request.transactionId)", "consumption.account": "\(facts.accountId ?? "")",
            "consumption.holders": .stringConvertible(facts.holders.count), "consumption.reason": "\(request.reason ?? "")",
            "consumption.decision": "\(decision.outcome.rawValue)",
        ])
        guard dryRun else { return }
        let holders = facts.holders.isEmpty ? "none" : facts.holders.map(\.accountId).joined(separator: ", ")
        let text: String = switch decision {
        case .send(let body, _): body.json
        case .skip(let outcome, let detail): "nothing sent: \(outcome.rawValue): \(detail)"
        case .noConsent(let missing, let detail): "nothing sent: no_consent (\(missing.rawValue)): \(detail)"
        }
        show("transaction \(request.transactionId) (account \(holders)): \(text)")
    }

    /// A dry run's view of the recorded answers still to send: the body recorded (each is decided
    /// again, consent read again, only when it leaves).
    private func showPending(show: @Sendable (String) -> Void) async throws {
        for open in try await store.pending() {
            show("transaction \(open.transactionId) (recorded earlier, decided again when it leaves; recorded body): \(open.body)")
        }
    }

    /// A verified CONSUMPTION_REQUEST and the signed transaction it carries.
    struct VerifiedRequest {
        var request: ConsumptionRequest
        var transaction: JWSTransaction
        var signedDate: Date?

        /// The transaction as the notification's processing writes it to the ledger.
        func ledgerEntry(accountId: String, now: Date) -> LedgerEntry {
            LedgerEntry(
                accountId: accountId, transaction: transaction.ledgerTransaction, environment: request.environment, source: .notificationV2,
                signed: transaction.signedTerms, asOf: signedDate ?? transaction.signedDate ?? now)
        }
    }

    /// The verified request a stored notification is, or nil: not a V2 CONSUMPTION_REQUEST, or
    /// one that did not verify (counted, nothing of it read).
    private func request(of pending: NotificationStore.Pending, summary: inout ConsumptionSummary) async throws -> VerifiedRequest? {
        guard let signed = NotificationV2Body.signedPayload(Array(pending.body.utf8)) else { return nil }
        let verified: VerifiedNotificationV2
        do {
            verified = try await verifier.verifyNotification(signedPayload: signed)
        } catch {
            summary.rejected += 1
            // Counted in the summary; the nightly run reports each rejected notification as a warning already.
            logger.info("consumption.notification_rejected", metadata: [
                "notification.id": .stringConvertible(pending.id), "notification.reason": "\(error.reason)",
            ])
            return nil
        }
        let payload = verified.payload
        guard payload.notificationType == .consumptionRequest else { return nil }
        guard let uuid = payload.notificationUUID, let transaction = verified.transaction,
              let requestedAt = payload.signedDate ?? transaction.signedDate
        else {
            summary.rejected += 1
            logger.warning("consumption.request_incomplete", metadata: [
                "notification.id": .stringConvertible(pending.id), "notification.reason": "no notificationUUID, signedTransactionInfo or signedDate",
            ])
            return nil
        }
        let request = ConsumptionRequest(
            notificationUUID: uuid, transactionId: transaction.transactionId, originalTransactionId: transaction.originalTransactionId,
            productId: transaction.productId, productType: transaction.type, subscriptionGroupIdentifier: transaction.subscriptionGroupIdentifier,
            environment: AppleEnvironment(appleName: transaction.rawEnvironment ?? payload.rawEnvironment) ?? .production,
            reason: payload.rawConsumptionRequestReason, requestedAt: requestedAt, isAdvancedCommerce: transaction.hasAdvancedCommerceInfo,
            purchaseDate: transaction.purchaseDate)
        return VerifiedRequest(request: request, transaction: transaction, signedDate: payload.signedDate)
    }

    /// Attempts one run makes for one answer (Apple's 5xx, timeouts, a 429 it paused for): each
    /// decided again and claimed anew, so that no attempt leaves past a withdrawal or the deadline.
    static let attemptsPerRun = 5
    /// How long a claimed answer may wait for Apple's endpoint before it leaves; past it, it is not
    /// sent and is decided again (consent read again) before it is tried again.
    static let leaveWithin: TimeInterval = 5
    /// The pause between two attempts of one answer, by default.
    public static let defaultBackoff = Backoff(base: .milliseconds(200), maximum: .seconds(5))

    /// Steps 3 and 4's end: pending answers whose deadline passed end `past_deadline` or `failed`,
    /// each counted once by what it became (`countedPending`: counted `pending` by this run already).
    private func expire(summary: inout ConsumptionSummary, countedPending: Set<Int64>) async throws {
        let expired = try await store.expire(now: Date(), margin: policy.deadlineMargin)
        guard !expired.isEmpty else { return }
        logger.warning("consumption.past_deadline", metadata: ["consumption.count": .stringConvertible(expired.count)])
        for (id, outcome) in expired {
            if countedPending.contains(id) { summary.outcomes[.pending, default: 0] -= 1 }
            summary.outcomes[outcome, default: 0] += 1
        }
    }

    /// Step 4: each pending answer, oldest request first, within the endpoint's budget.
    private func sendPending(summary: inout ConsumptionSummary) async throws {
        guard let client else { return }
        var countedPending: Set<Int64> = []
        answers: for open in try await store.pending() {
            let lastMoment = open.deadline.addingTimeInterval(-policy.deadlineMargin)
            var attempt = 0
            attempts: while Date() < lastMoment {
                // A 429's pause is waited out before the answer is decided, never after.
                while client.isPaused(.consumption, environment: open.environment), Date() < lastMoment {
                    try? await Task.sleep(for: .milliseconds(100))
                }
                let claim = try await store.claimForSending(open.id, now: Date()) { [policy] request, facts in
                    ConsumptionDecision.decide(request, facts, policy: policy, now: Date())
                }
                let body: String
                switch claim {
                case .gone: break attempts
                case .withheld(let decision):
                    summary.count(decision, countPending: false)
                    logger.notice("consumption.withheld", metadata: [
                        "consumption.transaction_id": "\(open.transactionId)", "consumption.outcome": "\(decision.outcome.rawValue)",
                    ])
                    break attempts
                case .send(let decided): body = decided
                }
                TestFault.dieIfPoison(consumptionAnswerOf: open.transactionId)
                attempt += 1
                let leaveBy = min(Date().addingTimeInterval(Self.leaveWithin), lastMoment)
                let outcome = await client.sendConsumptionInformation(
                    transactionId: open.transactionId, environment: open.environment, body: body, leaveBy: leaveBy)
                let ended: ConsumptionOutcome
                switch outcome.result {
                case .success:
                    ended = .sent
                    try await store.finish(open.id, outcome: .sent, httpStatus: 202, errorCode: nil, detail: nil, now: Date())
                case .failure(.failed(let status, let code, let reason)) where status.map({ (400...499).contains($0) }) ?? false:
                    ended = .refused
                    try await store.finish(open.id, outcome: .refused, httpStatus: status, errorCode: code, detail: reason, now: Date())
                case .failure(.unauthorized(let reason)):
                    try await store.retryLater(open.id, detail: reason)
                    throw Unauthorized(description: reason)
                case .failure(let failure):
                    // Not taken (5xx, a timeout, a 429, Apple's stop, a wait too long): pending again;
                    // tried again, decided anew, while this run's attempts and the deadline allow.
                    try await store.retryLater(open.id, detail: NotificationHistoryFeed.describe(failure))
                    if outcome.throttled && !client.isPaused(.consumption, environment: open.environment) {
                        // A 429 this run cannot wait out (no Retry-After, or a longer one): the
                        // quota is the app server's too, so every answer waits for the next run.
                        let why = "Apple answered 429 without a pause this run waits out: the answers left wait for the next run"
                        summary.warnings.append(why)
                        summary.outcomes[.pending, default: 0] += 1
                        countedPending.insert(open.id)
                        logger.warning("consumption.throttled", metadata: ["consumption.reason": "\(why)"])
                        break answers
                    }
                    if attempt < Self.attemptsPerRun {
                        try? await Task.sleep(for: backoff.delay(afterAttempt: attempt))
                        continue attempts
                    }
                    ended = .pending
                    countedPending.insert(open.id)
                    if !outcome.throttled {  // a 429 is Apple saying wait, not Apple out of reach
                        summary.appleUnreachable.append(
                            "the answer for transaction \(open.transactionId) was not taken: \(NotificationHistoryFeed.describe(failure))")
                    }
                }
                summary.outcomes[ended, default: 0] += 1
                logger.notice("consumption.answer", metadata: [
                    "consumption.transaction_id": "\(open.transactionId)", "consumption.account": "\(open.accountId ?? "")",
                    "consumption.outcome": "\(ended.rawValue)", "consumption.attempts": .stringConvertible(attempt),
                ])
                break attempts
            }
        }
        try await expire(summary: &summary, countedPending: countedPending)
    }
}
