import AppStoreModels
import Foundation
import Postgres
import Reconciliation

/// The SQL of answering CONSUMPTION_REQUESTs (docs/consumption.md): the stored V2 notifications
/// not yet examined, what the app declared and the ledger knows, and `iap.consumption_answers`,
/// where each request is recorded before anything is sent.
public struct ConsumptionStore: Sendable {
    /// Storage's alone: every statement and transaction on it is written here, never by a caller.
    let connection: PostgresConnection

    public init(connection: PostgresConnection) {
        self.connection = connection
    }

    /// Ends the session; later calls fail with `connectionClosed`.
    public func close() async {
        await connection.close()
    }

    /// Taken for the whole of one `answer-consumption-requests`, on its own session: one at a
    /// time, so that a row left `sending` is known to be a dead process's ("rrcons").
    static let lockKey: Int64 = 0x7272_636F_6E73

    /// False when another answering process holds the lock.
    public func tryLock() async throws -> Bool {
        try await connection.query("SELECT pg_try_advisory_lock(\(Self.lockKey)) AS ok")[0].decode("ok")
    }

    /// Stored V2 notifications received since `since` (and after `after`) that no answering
    /// process examined yet, oldest first: candidates, each verified before anything of it is read.
    public func unexamined(since: Date, after: (Date, Int64)?, limit: Int) async throws -> [NotificationStore.Pending] {
        try await connection.query("""
            SELECT id, received_at, body::text AS body FROM iap.notifications
            WHERE consumption_examined_at IS NULL AND notification_uuid IS NOT NULL AND received_at >= \(since)
              AND (\(after?.0)::timestamptz IS NULL OR (received_at, id) > (\(after?.0), \(after?.1)))
            ORDER BY received_at, id LIMIT \(limit)
            """).map { NotificationStore.Pending(id: try $0.decode("id"), receivedAt: try $0.decode("received_at"), body: try $0.decode("body")) }
    }

    /// Marks notifications examined: not a request, or one that did not verify.
    public func markExamined(_ ids: [Int64], now: Date) async throws {
        guard !ids.isEmpty else { return }
        try await connection.execute("""
            UPDATE iap.notifications SET consumption_examined_at = \(now) WHERE id = ANY(\(PostgresArray(ids))::bigint[])
            """)
    }

    /// Records one request and its decision, and marks its notification examined, in one
    /// transaction. Nil when the request (its notificationUUID) was recorded before: never two answers.
    public func record(
        _ request: ConsumptionRequest, notificationId: Int64, facts: ConsumptionFacts, decision: ConsumptionDecision, now: Date
    ) async throws -> Int64? {
        let (body, detail, why) = Self.columns(decision)
        return try await connection.withTransaction { connection in
            let id: Int64? = try await connection.query("""
                INSERT INTO iap.consumption_answers (notification_id, notification_uuid, transaction_id, original_transaction_id, product_id,
                    product_type, subscription_group_identifier, purchase_date, account_id, holders, environment, reason, requested_at,
                    deadline, outcome, why, body, detail, recorded_at, answered_at)
                VALUES (\(notificationId), \(request.notificationUUID), \(request.transactionId), \(request.originalTransactionId),
                        \(request.productId), \(request.productType?.rawValue), \(request.subscriptionGroupIdentifier), \(request.purchaseDate),
                        \(facts.accountId), \(facts.holders.map(\.accountId)), \(request.environment.rawValue), \(request.reason),
                        \(request.requestedAt), \(request.deadline), \(decision.outcome.rawValue), \(why), \(body), \(detail), \(now),
                        \(Self.isFinal(decision, facts) ? now : nil))
                ON CONFLICT (notification_uuid) DO NOTHING
                RETURNING id
                """).first.map { try $0.decode("id") }
            try await connection.execute("UPDATE iap.notifications SET consumption_examined_at = \(now) WHERE id = \(notificationId)")
            return id
        }
    }

    /// A want of consent that is final when found: a holder said no. `answered_at` is set on it
    /// (as on any answer withheld when it was about to leave): no run examines it again.
    static func isFinal(_ decision: ConsumptionDecision, _ facts: ConsumptionFacts) -> Bool {
        decision.missingConsent != nil && facts.anyDeclined
    }

    /// The body, detail and `why` a decision is recorded with.
    static func columns(_ decision: ConsumptionDecision) -> (body: String?, detail: String?, why: String?) {
        switch decision {
        case .send(let information, let note): (information.json, note, nil)
        case .skip(_, let detail): (nil, detail, nil)
        case .noConsent(let missing, let detail): (nil, detail, missing.rawValue)
        }
    }

    /// A request recorded without an answer that a later run may still give, with its notification.
    public struct Undecided: Sendable {
        public var id: Int64
        public var outcome: ConsumptionOutcome
        public var why: MissingConsent?
        public var notification: NotificationStore.Pending
    }

    /// The requests an earlier run recorded `unmatched` (no holder, or not in the ledger), or
    /// `no_consent` for want of a consent row (never once a holder said no, and never once an
    /// answer was about to leave: both set `answered_at`, final), whose deadline is still
    /// ahead, oldest first: examined again every run, since the ledger or the consent may have come.
    public func undecided(now: Date) async throws -> [Undecided] {
        try await connection.query("""
            SELECT a.id, a.outcome, a.why, n.id AS notification_id, n.received_at, n.body::text AS body
            FROM iap.consumption_answers a JOIN iap.notifications n ON n.id = a.notification_id
            WHERE (a.outcome = 'unmatched' OR (a.outcome = 'no_consent' AND a.why IN ('no_consent_row', 'ambiguous_holder')))
              AND a.answered_at IS NULL AND a.deadline > \(now) AND a.recorded_at < \(now)
            ORDER BY a.requested_at, a.id
            """).map { row in
            Undecided(
                id: try row.decode("id"), outcome: ConsumptionOutcome(rawValue: try row.decode("outcome")) ?? .unmatched,
                why: try row.decode("why", as: String?.self).flatMap(MissingConsent.init(rawValue:)),
                notification: NotificationStore.Pending(
                    id: try row.decode("notification_id"), receivedAt: try row.decode("received_at"), body: try row.decode("body")))
        }
    }

    /// An undecided request, decided again: its new outcome, holders and body. Nothing when an
    /// answer to it was given or withheld meanwhile.
    public func decideAgain(_ id: Int64, facts: ConsumptionFacts, decision: ConsumptionDecision) async throws {
        let (body, detail, why) = Self.columns(decision)
        try await connection.execute("""
            UPDATE iap.consumption_answers
            SET outcome = \(decision.outcome.rawValue), why = \(why), body = \(body), detail = \(detail),
                account_id = \(facts.accountId), holders = \(facts.holders.map(\.accountId)),
                answered_at = \(Self.isFinal(decision, facts) ? Date() : nil)
            WHERE id = \(id) AND outcome IN ('unmatched', 'no_consent') AND answered_at IS NULL
            """)
    }

    /// One recorded answer still to send.
    public struct Open: Sendable, Equatable {
        public var id: Int64
        public var transactionId: String
        public var accountId: String?
        public var environment: AppleEnvironment
        public var deadline: Date
        public var body: String
    }

    /// The pending answers, oldest request first.
    public func pending() async throws -> [Open] {
        try await connection.query("""
            SELECT id, transaction_id, account_id, environment, deadline, body
            FROM iap.consumption_answers WHERE outcome = 'pending' AND body IS NOT NULL
            ORDER BY requested_at, id
            """).map { row in
            Open(
                id: try row.decode("id"), transactionId: try row.decode("transaction_id"), accountId: try row.decode("account_id"),
                environment: AppleEnvironment(rawValue: try row.decode("environment")) ?? .production,
                deadline: try row.decode("deadline"), body: try row.decode("body"))
        }
    }

    /// Apple's answer, or what ended the request.
    public func finish(_ id: Int64, outcome: ConsumptionOutcome, httpStatus: Int?, errorCode: Int?, detail: String?, now: Date) async throws {
        try await connection.execute("""
            UPDATE iap.consumption_answers
            SET outcome = \(outcome.rawValue), http_status = \(httpStatus), error_code = \(errorCode.map(Int64.init)),
                detail = COALESCE(\(detail), detail), answered_at = \(now)
            WHERE id = \(id)
            """)
    }

    /// Not taken this time (a 5xx or a timeout after every attempt, Apple's stop): pending again,
    /// for the next run while the deadline allows.
    public func retryLater(_ id: Int64, detail: String) async throws {
        try await connection.execute("""
            UPDATE iap.consumption_answers SET outcome = 'pending', detail = \(detail) WHERE id = \(id) AND outcome = 'sending'
            """)
    }

    /// Rows a dead process left `sending` (the lock says no live one is sending): Apple may have
    /// the answer, so it is never sent again. Returns how many.
    public func failInterrupted() async throws -> Int {
        try await connection.query("""
            UPDATE iap.consumption_answers
            SET outcome = 'failed', detail = 'the process ended while the answer was leaving: Apple may have it, so it is not sent again'
            WHERE outcome = 'sending'
            RETURNING id
            """).count
    }

    /// Pending answers whose deadline (less `margin`) passed: `past_deadline` when never tried,
    /// `failed` when transient errors lasted until then. Returns each, with its outcome.
    public func expire(now: Date, margin: TimeInterval) async throws -> [(id: Int64, outcome: ConsumptionOutcome)] {
        try await connection.query("""
            UPDATE iap.consumption_answers
            SET outcome = CASE WHEN attempts = 0 THEN 'past_deadline' ELSE 'failed' END,
                detail = CASE WHEN attempts = 0 THEN 'its 12 hours ended before it could be sent'
                              ELSE COALESCE(detail || '; ', '') || 'its 12 hours ended before Apple took it' END
            WHERE outcome = 'pending' AND deadline - make_interval(secs => \(margin)) <= \(now)
            RETURNING id, outcome
            """).map { (try $0.decode("id"), ConsumptionOutcome(rawValue: try $0.decode("outcome")) ?? .failed) }
    }

    /// The requests Apple asked since `since`, by their answers' outcome.
    public func outcomes(since: Date) async throws -> [String: Int] {
        Dictionary(uniqueKeysWithValues: try await connection.query("""
            SELECT outcome, count(*) AS requests FROM iap.consumption_answers WHERE requested_at >= \(since) GROUP BY outcome
            """).map { (try $0.decode("outcome", as: String.self), Int(try $0.decode("requests", as: Int64.self))) })
    }

    /// When the oldest request still waiting for its answer was made (its answer not left, or its
    /// transaction not matched yet and its deadline ahead); nil when none waits.
    public func oldestOpenRequest(now: Date) async throws -> Date? {
        try await connection.query("""
            SELECT min(requested_at) AS oldest FROM iap.consumption_answers
            WHERE outcome IN ('pending', 'sending') OR (outcome = 'unmatched' AND deadline > \(now))
            """)[0].decode("oldest")
    }
}
