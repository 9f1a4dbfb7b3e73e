import AppStore
import AppStoreModels
import Foundation
import Logging
import Reconciliation
import SignedData
import Storage

/// Answers Apple's CONSUMPTION_REQUESTs (docs/consumption.md), in four steps:
///
/// 1. reads Get Notification History for the requests of the last 13 hours (CONSUMPTION_REQUEST
///    only), storing each as an ingested notification would be, so that one the app server
///    missed is still answered in time;
/// 2. verifies each stored V2 notification no answering process examined yet, and records every
///    CONSUMPTION_REQUEST among them in `iap.consumption_answers` with its decision: the body to
///    send, or why nothing is sent;
/// 3. turns the pending answers whose deadline passed `past_deadline` (or `failed`);
/// 4. sends each pending answer: marked `sending` in a commit of its own first, so that a process
///    killed in between never sends it twice.
public struct ConsumptionAnswering: Sendable {
    public var store: ConsumptionStore
    public var notifications: NotificationStore
    public var verifier: SignedDataVerifier
    /// Nil in a dry run: nothing is asked of Apple.
    public var client: ServerAPIClient?
    public var policy: ConsumptionPolicy
    /// Stored notifications older than this are not examined: their 12 hours are long over.
    public var lookBack: TimeInterval
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
                logger.error("consumption.interrupted", metadata: ["consumption.count": "\(interrupted)"])
            }
            try await readHistory(now: now, summary: &summary)
        }
        try await examine(now: now, dryRun: dryRun, summary: &summary, show: show)
        if dryRun {
            for open in try await store.pending() { show("transaction \(open.transactionId) (recorded earlier): \(open.body)") }
        } else {
            let expired = try await store.expire(now: now, margin: policy.deadlineMargin)
            if expired > 0 {
                logger.warning("consumption.past_deadline", metadata: ["consumption.count": "\(expired)"])
                summary.outcomes[.pastDeadline, default: 0] += expired
            }
            try await sendPending(summary: &summary)
        }
        summary.oldestOpenRequest = try await store.oldestOpenRequest()
        summary.finishedAt = Date()
        return summary
    }

    /// Step 1: the requests Apple sent lately, stored once by their notificationUUID.
    private func readHistory(now: Date, summary: inout ConsumptionSummary) async throws {
        guard let client else { return }
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
                    logger.warning("consumption.history_unread", metadata: ["consumption.reason": "\(why)"])
                    break pages
                case .success(let answer):
                    summary.fromHistory += try await notifications.insert(bodies: answer.signedPayloads.map(NotificationHistoryFeed.body), byUUIDOnly: true)
                    guard answer.hasMore, let next = answer.paginationToken, next != token else { break pages }
                    token = next
                }
            }
        }
    }

    /// Step 2: every stored V2 notification not examined yet, verified; each request recorded.
    private func examine(now: Date, dryRun: Bool, summary: inout ConsumptionSummary, show: @Sendable (String) -> Void) async throws {
        var after: (Date, Int64)?
        while true {
            let page = try await store.unexamined(since: now.addingTimeInterval(-lookBack), after: after, limit: Self.pageSize)
            guard let last = page.last else { return }
            after = (last.receivedAt, last.id)
            var notRequests: [Int64] = []
            for pending in page {
                summary.examined += 1
                guard let request = try await request(of: pending, summary: &summary) else {
                    notRequests.append(pending.id)
                    continue
                }
                summary.requests += 1
                let facts = try await store.facts(for: request, now: now)
                let decision = ConsumptionDecision.decide(request, facts, policy: policy, now: now)
                let (outcome, body, detail): (ConsumptionOutcome, String?, String?) = switch decision {
                case .send(let information, let note): (.pending, information.json, note)
                case .skip(let outcome, let detail): (outcome, nil, detail)
                }
                logger.info("consumption.request", metadata: [
                    "consumption.transaction_id": "\(request.transactionId)", "consumption.account": "\(facts.accountId ?? "")",
                    "consumption.reason": "\(request.reason ?? "")", "consumption.decision": "\(outcome.rawValue)",
                ])
                if dryRun {
                    summary.outcomes[outcome, default: 0] += 1
                    show("transaction \(request.transactionId) (account \(facts.accountId ?? "none")): "
                        + (body ?? "nothing sent: \(outcome.rawValue): \(detail ?? "")"))
                    continue
                }
                let recorded = try await store.record(
                    request, notificationId: pending.id, accountId: facts.accountId, outcome: outcome, body: body, detail: detail, now: now)
                if recorded != nil && outcome != .pending { summary.outcomes[outcome, default: 0] += 1 }
            }
            if !dryRun { try await store.markExamined(notRequests, now: now) }
        }
    }

    /// The verified request a stored notification is, or nil: not a V2 CONSUMPTION_REQUEST, or
    /// one that did not verify (counted, nothing of it read).
    private func request(of pending: NotificationStore.Pending, summary: inout ConsumptionSummary) async throws -> ConsumptionRequest? {
        guard let signed = NotificationV2Body.signedPayload(Array(pending.body.utf8)) else { return nil }
        let verified: VerifiedNotificationV2
        do {
            verified = try await verifier.verifyNotification(signedPayload: signed)
        } catch {
            summary.rejected += 1
            // Counted in the summary; the nightly run reports each rejected notification as a warning already.
            logger.info("consumption.notification_rejected", metadata: [
                "notification.id": "\(pending.id)", "notification.reason": "\(error.reason)",
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
                "notification.id": "\(pending.id)", "notification.reason": "no notificationUUID, signedTransactionInfo or signedDate",
            ])
            return nil
        }
        return ConsumptionRequest(
            notificationUUID: uuid, transactionId: transaction.transactionId, originalTransactionId: transaction.originalTransactionId,
            productId: transaction.productId, productType: transaction.type, subscriptionGroupIdentifier: transaction.subscriptionGroupIdentifier,
            environment: AppleEnvironment(appleName: transaction.rawEnvironment ?? payload.rawEnvironment) ?? .production,
            reason: payload.rawConsumptionRequestReason, requestedAt: requestedAt, isAdvancedCommerce: transaction.hasAdvancedCommerceInfo)
    }

    /// Step 4: each pending answer, oldest request first, within the endpoint's budget.
    private func sendPending(summary: inout ConsumptionSummary) async throws {
        guard let client else { return }
        for open in try await store.pending() {
            guard Date() < open.deadline.addingTimeInterval(-policy.deadlineMargin) else {
                let expired = try await store.expire(now: Date(), margin: policy.deadlineMargin)
                if expired > 0 { summary.outcomes[.pastDeadline, default: 0] += expired }
                continue
            }
            guard try await store.markSending(open.id, now: Date()) else { continue }
            TestFault.dieIfPoison(consumptionAnswerOf: open.transactionId)
            let outcome = await client.sendConsumptionInformation(transactionId: open.transactionId, environment: open.environment, body: open.body)
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
                // Not taken (5xx, a timeout, Apple's stop): tried again while the deadline allows.
                ended = .pending
                try await store.retryLater(open.id, detail: NotificationHistoryFeed.describe(failure))
            }
            summary.outcomes[ended, default: 0] += 1
            logger.notice("consumption.answer", metadata: [
                "consumption.transaction_id": "\(open.transactionId)", "consumption.account": "\(open.accountId ?? "")",
                "consumption.outcome": "\(ended.rawValue)", "consumption.requests": "\(outcome.requests)",
            ])
        }
    }
}
