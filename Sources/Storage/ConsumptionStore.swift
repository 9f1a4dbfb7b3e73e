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

    /// What the app declared and the verified ledger knows for one request.
    public func facts(for request: ConsumptionRequest, now: Date) async throws -> ConsumptionFacts {
        let ids = [request.originalTransactionId, request.transactionId].compactMap { $0 }
        guard let account = try await NotificationStore(connection: connection).accounts(owning: ids).first else {
            return ConsumptionFacts(accountId: nil)
        }
        let since = now.addingTimeInterval(-ConsumptionRequest.answerWindow)
        let row = try await connection.query("""
            SELECT c.consented, c.refund_preference, u.consumption_percentage, u.delivery_status,
                   (u.transaction_id IS NOT NULL) AS has_usage,
                   (l.transaction_id IS NOT NULL) AS in_ledger, (l.cancellation_date IS NOT NULL) AS revoked,
                   EXISTS (SELECT 1 FROM iap.transactions t
                           WHERE t.account_id = \(account)
                             AND (t.product_id = \(request.productId)
                                  OR (\(request.subscriptionGroupIdentifier)::text IS NOT NULL
                                      AND t.subscription_group_identifier = \(request.subscriptionGroupIdentifier)))
                             AND (t.is_trial_period IS TRUE OR t.is_in_intro_offer_period IS TRUE)) AS sample,
                   EXISTS (SELECT 1 FROM iap.consumption_answers a
                           WHERE a.transaction_id = \(request.transactionId) AND a.notification_uuid <> \(request.notificationUUID)
                             AND (a.outcome IN ('pending', 'sending') OR (a.outcome = 'sent' AND a.answered_at > \(since)))) AS answered
            FROM (SELECT 1) AS one
            LEFT JOIN iap.consumption_consent c ON c.account_id = \(account)
            LEFT JOIN iap.consumption_usage u ON u.transaction_id = \(request.transactionId)
            LEFT JOIN iap.transactions l ON l.transaction_id = \(request.transactionId) AND l.account_id = \(account)
            """)[0]
        let consented: Bool? = try row.decode("consented")
        let usage: ConsumptionFacts.Usage? = try row.decode("has_usage", as: Bool.self)
            ? ConsumptionFacts.Usage(
                consumptionPercentage: try row.decode("consumption_percentage"),
                deliveryStatus: try row.decode("delivery_status", as: String?.self).flatMap(ConsumptionInformation.DeliveryStatus.init(rawValue:)))
            : nil
        let refundPreference = try row.decode("refund_preference", as: String?.self).flatMap(ConsumptionInformation.RefundPreference.init(rawValue:))
        return ConsumptionFacts(
            accountId: account,
            consent: consented.map { ConsumptionFacts.Consent(consented: $0, refundPreference: refundPreference) },
            usage: usage, inLedger: try row.decode("in_ledger"), revoked: try row.decode("revoked"), sampleInLedger: try row.decode("sample"),
            answeredRecently: try row.decode("answered"))
    }

    /// Records one request and its decision, and marks its notification examined, in one
    /// transaction. Nil when the request (its notificationUUID) was recorded before: never two answers.
    public func record(
        _ request: ConsumptionRequest, notificationId: Int64, accountId: String?, outcome: ConsumptionOutcome, body: String?,
        detail: String?, now: Date
    ) async throws -> Int64? {
        try await connection.withTransaction { connection in
            let id: Int64? = try await connection.query("""
                INSERT INTO iap.consumption_answers (notification_id, notification_uuid, transaction_id, original_transaction_id, product_id,
                    account_id, environment, reason, requested_at, deadline, outcome, body, detail, recorded_at)
                VALUES (\(notificationId), \(request.notificationUUID), \(request.transactionId), \(request.originalTransactionId),
                        \(request.productId), \(accountId), \(request.environment.rawValue), \(request.reason), \(request.requestedAt),
                        \(request.deadline), \(outcome.rawValue), \(body), \(detail), \(now))
                ON CONFLICT (notification_uuid) DO NOTHING
                RETURNING id
                """).first.map { try $0.decode("id") }
            try await connection.execute("UPDATE iap.notifications SET consumption_examined_at = \(now) WHERE id = \(notificationId)")
            return id
        }
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

    /// Turns a pending answer `sending`, committed before its request leaves; false when it is
    /// no longer pending (nothing is sent then).
    public func markSending(_ id: Int64, now: Date) async throws -> Bool {
        try await !connection.query("""
            UPDATE iap.consumption_answers SET outcome = 'sending', attempts = attempts + 1, answered_at = \(now)
            WHERE id = \(id) AND outcome = 'pending'
            RETURNING id
            """).isEmpty
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
    /// `failed` when transient errors lasted until then. Returns how many.
    public func expire(now: Date, margin: TimeInterval) async throws -> Int {
        try await connection.query("""
            UPDATE iap.consumption_answers
            SET outcome = CASE WHEN attempts = 0 THEN 'past_deadline' ELSE 'failed' END,
                detail = CASE WHEN attempts = 0 THEN 'its 12 hours ended before it could be sent'
                              ELSE COALESCE(detail || '; ', '') || 'its 12 hours ended before Apple took it' END
            WHERE outcome = 'pending' AND deadline - make_interval(secs => \(margin)) <= \(now)
            RETURNING id
            """).count
    }

    /// When the oldest request still waiting for its answer to leave was made; nil when none waits.
    public func oldestOpenRequest() async throws -> Date? {
        try await connection.query("""
            SELECT min(requested_at) AS oldest FROM iap.consumption_answers WHERE outcome IN ('pending', 'sending')
            """)[0].decode("oldest")
    }
}
