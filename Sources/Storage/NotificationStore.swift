import AppStoreModels
import CivilCalendar
import Foundation
import Postgres
import Reconciliation

/// The SQL of server notifications: storing bodies, and processing the unprocessed ones.
public struct NotificationStore: Sendable {
    /// Storage's alone: every statement and transaction on it is written here, never by a caller.
    let connection: PostgresConnection

    public init(connection: PostgresConnection) {
        self.connection = connection
    }

    /// Ends the session; later calls fail with `connectionClosed`.
    public func close() async {
        await connection.close()
    }

    /// Stores bodies as received (each one a JSON object), in one statement; returns how many
    /// were new. A V2 body already stored (Apple sends one again until it is answered) is not
    /// stored twice: its notificationUUID, read here unverified, and its bytes say so.
    ///
    /// `byUUIDOnly`: a V2 body whose notificationUUID is stored is not stored again, however it is
    /// wrapped or signed (Get Notification History may sign anew what the app server kept), unless
    /// every stored copy was rejected: a forged body posted with a real notification's UUID must not
    /// keep Apple's own copy out.
    @discardableResult
    public func insert(bodies: [String], byUUIDOnly: Bool = false) async throws -> Int {
        guard !bodies.isEmpty else { return 0 }
        let uuids = bodies.map { NotificationV2Body.unverifiedNotificationUUID(Array($0.utf8)) }
        return try await connection.query("""
            INSERT INTO iap.notifications (body, notification_uuid)
            SELECT b, u FROM unnest(\(PostgresArray(bodies))::jsonb[], \(PostgresArray(uuids))::text[]) AS n (b, u)
            WHERE NOT \(byUUIDOnly) OR u IS NULL
               OR NOT EXISTS (SELECT 1 FROM iap.notifications s WHERE s.notification_uuid = n.u AND s.outcome IS DISTINCT FROM 'rejected')
            ON CONFLICT DO NOTHING
            RETURNING 1
            """).count
    }

    /// Where Get Notification History stands for `environment`: the end of the last slice stored
    /// whole, and a slice a run left halfway with the token of its next page.
    public func notificationHistoryProgress(_ environment: AppleEnvironment) async throws
        -> (watermark: Date?, unfinished: (slice: NotificationHistorySlice, token: String)?)
    {
        guard let row = try await connection.query("""
            SELECT read_until, slice_start, slice_end, pagination_token
            FROM iap.notification_history_watermarks WHERE environment = \(environment.rawValue)
            """).first else { return (nil, nil) }
        let watermark: Date? = try row.decode("read_until")
        guard let start: Date = try row.decode("slice_start"), let end: Date = try row.decode("slice_end"),
              let token: String = try row.decode("pagination_token") else { return (watermark, nil) }
        return (watermark, (NotificationHistorySlice(start: start, end: end), token))
    }

    /// Moves the watermark to `slice.end` once every page of the slice is stored, and forgets the
    /// slice's token; never backwards (another worker may have read further meanwhile).
    public func finishNotificationHistorySlice(_ environment: AppleEnvironment, _ slice: NotificationHistorySlice) async throws {
        try await connection.execute("""
            INSERT INTO iap.notification_history_watermarks (environment, read_until) VALUES (\(environment.rawValue), \(slice.end))
            ON CONFLICT (environment) DO UPDATE
            SET read_until = GREATEST(iap.notification_history_watermarks.read_until, EXCLUDED.read_until),
                slice_start = NULL, slice_end = NULL, pagination_token = NULL, updated_at = now()
            """)
    }

    /// Keeps where a slice stands after a page is stored: the next run starts there if this one
    /// stops. Nil `token` forgets it (Apple refused the token: the slice is read from its start).
    public func keepNotificationHistorySlice(_ environment: AppleEnvironment, _ slice: NotificationHistorySlice, token: String?) async throws {
        let (start, end): (Date?, Date?) = token == nil ? (nil, nil) : (slice.start, slice.end)
        try await connection.execute("""
            INSERT INTO iap.notification_history_watermarks (environment, slice_start, slice_end, pagination_token)
            VALUES (\(environment.rawValue), \(start), \(end), \(token))
            ON CONFLICT (environment) DO UPDATE
            SET slice_start = EXCLUDED.slice_start, slice_end = EXCLUDED.slice_end, pagination_token = EXCLUDED.pagination_token,
                updated_at = now()
            """)
    }

    public struct Pending: Sendable {
        public var id: Int64
        public var receivedAt: Date
        public var body: String

        public init(id: Int64, receivedAt: Date, body: String) {
            self.id = id
            self.receivedAt = receivedAt
            self.body = body
        }
    }

    /// The next unprocessed notifications after `after`, oldest first: candidates only, each is
    /// claimed (`claim`, which decides) in the transaction that processes it.
    /// `suspects`: those a start never finished (a process died on them, or they were released from
    /// quarantine), instead of the others. `storedAfter`: only rows stored after that id.
    public func unprocessed(after: (Date, Int64)?, suspects: Bool = false, storedAfter: Int64? = nil, limit: Int) async throws -> [Pending] {
        return try await connection.query("""
            SELECT id, received_at, body::text AS body FROM iap.notifications
            WHERE processed_at IS NULL AND quarantined_at IS NULL AND (unfinished_starts > 0) = \(suspects)
              AND id > \(storedAfter ?? 0)
              AND (\(after?.0)::timestamptz IS NULL OR (received_at, id) > (\(after?.0), \(after?.1)))
            ORDER BY received_at, id LIMIT \(limit)
            """).map { Pending(id: try $0.decode("id"), receivedAt: try $0.decode("received_at"), body: try $0.decode("body")) }
    }

    /// Started unfinished this many times in a row, a notification is quarantined instead.
    public static let quarantineAfterUnfinishedStarts = 3

    /// What `start` decided.
    public enum Start: Sendable, Equatable {
        /// Counted as started: process it now.
        case process
        /// Started and never finished too many times in a row: set aside, not processed.
        case quarantined(reason: String)
        /// Another worker's, processed meanwhile, or quarantined already: leave it.
        case skip
        /// Another transaction holds its row (the consumption job, another shard's run): not
        /// started, nothing counted; not waited for either.
        case held
    }

    /// Counts one start of a notification, committed before its work begins (so that a process
    /// that dies in the middle leaves the count behind), and takes it for this run as `claim`
    /// would; or quarantines it when its earlier starts never finished.
    public func start(_ id: Int64, runId: Int64, now: Date) async throws -> Start {
        let limit = Self.quarantineAfterUnfinishedStarts
        let reason = "processing started \(limit) times and never finished: the process died each time (a crash or an out-of-memory kill; "
            + "once is enough for one on probation after its release)"
        let rows = try await connection.query("""
            WITH free AS (SELECT id FROM iap.notifications WHERE id = \(id) FOR NO KEY UPDATE SKIP LOCKED),
            started AS (
                UPDATE iap.notifications n SET
                    run_id = \(runId),
                    unfinished_starts = CASE WHEN unfinished_starts >= \(limit) THEN unfinished_starts ELSE unfinished_starts + 1 END,
                    quarantined_at = CASE WHEN unfinished_starts >= \(limit) THEN \(now)::timestamptz END,
                    quarantine_reason = CASE WHEN unfinished_starts >= \(limit) THEN \(reason) END
                FROM free
                WHERE n.id = free.id AND processed_at IS NULL AND quarantined_at IS NULL
                  AND NOT EXISTS (SELECT 1 FROM iap.reconciliation_runs r WHERE r.id = n.run_id AND r.id <> \(runId) AND r.status = 'running')
                RETURNING quarantine_reason
            )
            SELECT (SELECT count(*) FROM free) AS free, (SELECT count(*) FROM started) AS started,
                   (SELECT quarantine_reason FROM started) AS quarantine_reason
            """)
        guard let row = rows.first, try row.decode("free", as: Int64.self) == 1 else { return .held }
        guard try row.decode("started", as: Int64.self) == 1 else { return .skip }
        if let quarantined = try row.decode("quarantine_reason", as: String?.self) { return .quarantined(reason: quarantined) }
        return .process
    }

    /// Releases every quarantined notification (`backfill --retry-quarantined`): due again, on
    /// probation: a suspect, processed after the others, and quarantined again at the next start
    /// that does not finish, so that one still poisonous stops one run, not three. Returns how many.
    public func releaseQuarantined() async throws -> Int {
        try await connection.query("""
            UPDATE iap.notifications SET quarantined_at = NULL, quarantine_reason = NULL,
                unfinished_starts = \(Self.quarantineAfterUnfinishedStarts - 1)
            WHERE quarantined_at IS NOT NULL AND processed_at IS NULL
            RETURNING id
            """).count
    }

    /// Takes back a start that found the notification held by another transaction: it was not
    /// processed, so the start must not count toward its quarantine.
    public func takeBackStart(_ id: Int64, runId: Int64) async throws {
        try await connection.execute("""
            UPDATE iap.notifications SET unfinished_starts = greatest(unfinished_starts - 1, 0)
            WHERE id = \(id) AND run_id = \(runId) AND processed_at IS NULL AND quarantined_at IS NULL
            """)
    }

    /// The id of the last notification stored so far (0 when none).
    public func lastStoredId() async throws -> Int64 {
        try await connection.query("SELECT COALESCE(max(id), 0) AS id FROM iap.notifications")[0].decode("id")
    }

    /// Whether a notification was processed (by whoever held it meanwhile).
    public func isProcessed(_ id: Int64) async throws -> Bool {
        try await !connection.query("SELECT 1 FROM iap.notifications WHERE id = \(id) AND processed_at IS NOT NULL").isEmpty
    }

    /// Every notification quarantined now, by this run or an earlier one, until released: how
    /// many, and the first `limit` as `notification ID (since T): reason`.
    public func quarantinedNow(limit: Int) async throws -> (count: Int, listed: [String]) {
        let rows = try await connection.query("""
            SELECT id, quarantined_at, quarantine_reason, count(*) OVER () AS total FROM iap.notifications
            WHERE quarantined_at IS NOT NULL AND processed_at IS NULL ORDER BY quarantined_at, id LIMIT \(limit)
            """)
        let listed = try rows.map { row in
            let since = Timestamp.format(try row.decode("quarantined_at", as: Date.self))
            return "notification \(try row.decode("id", as: Int64.self)) (since \(since)): \(try row.decode("quarantine_reason", as: String?.self) ?? "")"
        }
        return (try rows.first?.decode("total", as: Int64.self)).map { (Int($0), listed) } ?? (0, [])
    }

    /// Processes one notification in one transaction: locks it (after `start` took it for this
    /// run, which decides between shards: a live run of another shard that tried it tonight keeps
    /// it), then hands `body` the only handle that writes its effects and its outcome, which
    /// commit together or not at all. Nil, and nothing done, when another transaction holds it
    /// or it was processed meanwhile.
    public func process<Result: Sendable>(
        _ id: Int64, runId: Int64, now: Date, _ body: (NotificationWrite) async throws -> Result
    ) async throws -> Result? {
        try await connection.withTransaction { _ in
            guard try await claim(id) else { return nil }
            return try await body(NotificationWrite(store: self, id: id, runId: runId, now: now))
        }
    }

    /// Locks one notification for the caller's transaction; false when another transaction holds
    /// it or it was processed meanwhile.
    func claim(_ id: Int64) async throws -> Bool {
        try await !connection.query("""
            SELECT 1 FROM iap.notifications WHERE id = \(id) AND processed_at IS NULL FOR UPDATE SKIP LOCKED
            """).isEmpty
    }

    /// Every account whose ledger or entitlements hold one of these original transaction ids: the
    /// ledger's first (its row names one account), then the others in account order. One Apple
    /// ID's purchase can be held by several app accounts (account switching on one device); a
    /// refund must reach each of them. An account that holds no entitlement row for it has
    /// nothing a refund could take away: its next verification records the refund all the same.
    func accounts(owning originalTransactionIds: [String]) async throws -> [String] {
        guard !originalTransactionIds.isEmpty else { return [] }
        return try await connection.query("""
            SELECT account_id, min(source) AS first_source FROM (
                SELECT account_id, 0 AS source FROM iap.transactions WHERE original_transaction_id = ANY(\(originalTransactionIds))
                UNION ALL
                SELECT account_id, 1 FROM iap.entitlements WHERE original_transaction_id = ANY(\(originalTransactionIds))
            ) found GROUP BY account_id ORDER BY first_source, account_id
            """).map { try $0.decode("account_id") }
    }

    /// Records an outcome and why; `processed` false leaves it for a later run (unmatched, not given up).
    func mark(
        _ id: Int64, outcome: NotificationOutcome, reason: String? = nil, processed: Bool, accountId: String?, runId: Int64?, now: Date,
        rejectedConfiguration: String? = nil
    ) async throws {
        try await connection.execute("""
            UPDATE iap.notifications SET outcome = \(outcome.rawValue), reason = \(reason), account_id = \(accountId), run_id = \(runId),
                processed_at = CASE WHEN \(processed) THEN \(now)::timestamptz ELSE NULL END,
                unfinished_starts = 0, rejected_configuration = \(rejectedConfiguration)
            WHERE id = \(id)
            """)
    }

    /// Rejected notifications made due again, before a run processes: those a configuration check
    /// refused under another configuration than `configuration` (fixed since, or changed: examined
    /// again under this one), or, with `all` (`backfill --retry-rejected`), every rejected one; a
    /// forged body is rejected again. Returns how many.
    public func reopenRejected(configuration: String, all: Bool) async throws -> Int {
        try await connection.query("""
            UPDATE iap.notifications SET processed_at = NULL, outcome = NULL, reason = NULL, rejected_configuration = NULL
            WHERE outcome = 'rejected' AND processed_at IS NOT NULL AND quarantined_at IS NULL
              AND (\(all) OR (rejected_configuration IS NOT NULL AND rejected_configuration <> \(configuration)))
            RETURNING id
            """).count
    }

    /// Whether another notification with this notificationUUID was applied or recorded already.
    func wasProcessed(notificationUUID: String, except id: Int64) async throws -> Bool {
        try await !connection.query("""
            SELECT 1 FROM iap.notifications
            WHERE notification_uuid = \(notificationUUID) AND id <> \(id) AND outcome IN ('applied', 'recorded') AND processed_at IS NOT NULL
            LIMIT 1
            """).isEmpty
    }

    /// A V2 notification's transactions into the ledger (`NotificationWrite.upsertLedger`), after
    /// noting each account's last live verification as Apple's latest word on those it spoke of.
    func upsertSignedLedger(_ entries: [LedgerEntry]) async throws {
        // One statement, as `ReconciliationStore.noteLatestWord` for each row with its own account's
        // time; only where that answer was current (docs/database.md, "The ledger"): a production
        // row, not a consumable's (verifyReceipt cannot show its refund), by Apple's signed type
        // here or in the row, else the catalog's.
        let spoken = entries.filter { $0.signed?.rawProductType != SignedProductType.consumable.rawValue }.map(\.transaction.transactionId)
        // None (a consumable's notification): no statement, whose plan for an empty list once read
        // every refunded row of the ledger.
        if !spoken.isEmpty {
            try await connection.execute("""
                UPDATE iap.transactions t SET apple_as_of = v.verified
                FROM (SELECT l.transaction_id, max(r.last_verified_at) AS verified
                      FROM iap.transactions l JOIN iap.app_receipts r
                        ON r.account_id = l.account_id AND COALESCE(l.original_transaction_id, l.transaction_id) = ANY(r.ledger_original_transaction_ids)
                      LEFT JOIN iap.products p ON p.product_id = l.product_id
                      WHERE l.transaction_id = ANY(\(spoken)) AND r.last_verified_at IS NOT NULL AND l.environment = 'Production'
                        AND COALESCE(l.signed_product_type = \(SignedProductType.consumable.rawValue), p.type = 'consumable') IS NOT TRUE
                      GROUP BY l.transaction_id) v
                WHERE t.transaction_id = ANY(\(spoken)) AND t.transaction_id = v.transaction_id
                  AND COALESCE(t.apple_as_of, '-infinity') < v.verified
                """)
        }
        try await ReconciliationStore(connection: connection).upsertLedger(entries)
    }

    /// One verified transaction Apple signed into a notification, written to the ledger as that
    /// notification's processing would write it, in a transaction of its own, and its holders'
    /// receipts made due: answering a CONSUMPTION_REQUEST judges delivery from the ledger, and a
    /// renewal bought since the last run is not in it yet. The notification itself is left for
    /// the nightly run, which finds the row written (and writes nothing again).
    public func recordInLedger(_ entry: LedgerEntry, holders: [String], now: Date) async throws {
        try await connection.withTransaction { _ in
            try await upsertSignedLedger([entry])
            for holder in holders { try await requestReverification(accountId: holder, now: now) }
        }
    }

    /// Whether a notification with this notificationUUID is stored.
    public func isStored(notificationUUID: String) async throws -> Bool {
        try await !connection.query("SELECT 1 FROM iap.notifications WHERE notification_uuid = \(notificationUUID) LIMIT 1").isEmpty
    }

    /// Makes every receipt of the account due now, and its ledger written again by that run
    /// (the notification wrote ledger rows the last answer's digest does not describe).
    public func requestReverification(accountId: String, now: Date) async throws {
        try await connection.execute("""
            UPDATE iap.app_receipts SET reverify_requested_at = \(now), ledger_digest = NULL WHERE account_id = \(accountId)
            """)
    }
}

/// What one notification's transaction may do (`NotificationStore.process`): read what matching
/// needs, write the ledger and the account's reverification, record the outcome. Everything goes
/// through the transaction's own session; the handle must not outlive the call that gave it.
public struct NotificationWrite {
    fileprivate let store: NotificationStore
    public let id: Int64
    fileprivate let runId: Int64
    /// The run's clock.
    public let now: Date

    fileprivate init(store: NotificationStore, id: Int64, runId: Int64, now: Date) {
        self.store = store
        self.id = id
        self.runId = runId
        self.now = now
    }

    /// Records the outcome and why; `processed` false leaves it for a later run (unmatched, not given up).
    /// `rejectedConfiguration`: the fingerprint of the configuration a configuration check refused it under.
    public func record(
        _ outcome: NotificationOutcome, reason: String? = nil, processed: Bool = true, accountId: String? = nil, rejectedConfiguration: String? = nil
    ) async throws {
        try await store.mark(id, outcome: outcome, reason: reason, processed: processed, accountId: accountId, runId: runId, now: now,
                             rejectedConfiguration: rejectedConfiguration)
    }

    /// Every account whose ledger or entitlements hold one of these original transaction ids, the ledger's first.
    public func accounts(owning originalTransactionIds: [String]) async throws -> [String] {
        try await store.accounts(owning: originalTransactionIds)
    }

    /// Whether another notification with this notificationUUID was applied or recorded already.
    public func wasProcessedBefore(notificationUUID: String) async throws -> Bool {
        try await store.wasProcessed(notificationUUID: notificationUUID, except: id)
    }

    /// Makes the account's receipts due now, as `NotificationStore.requestReverification`.
    public func requestReverification(accountId: String) async throws {
        try await store.requestReverification(accountId: accountId, now: now)
    }

    /// Upserts a notification's transactions, after noting the account's last live verification
    /// as Apple's latest word on those it spoke of (their chains were in its answer:
    /// `ledger_original_transaction_ids`): a verification that changed nothing rewrote no row, and
    /// a notification signed before it is stale all the same.
    public func upsertLedger(_ entries: [LedgerEntry]) async throws {
        try await store.upsertSignedLedger(entries)
    }
}

/// A handle of one transaction, on the task that runs it: never sent elsewhere.
@available(*, unavailable)
extension NotificationWrite: Sendable {}
