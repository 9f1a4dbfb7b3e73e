import Foundation
import Logging
import Postgres

/// The finance journal's first recording over a ledger older than the journal (docs/database.md,
/// "Migrations on a big database"): `migrate` queues it (Migrations/0037) and makes it after the
/// files, a chunk of whole chains a transaction (a restored copy is looked at with its purchase;
/// each row once). Each transaction
/// records its rows' events by the journal's own rules and moves the cursor with them, so no
/// transaction grows with the ledger and a migrate stopped anywhere resumes where it stopped.
///
/// Every event it records is stamped with the time it was queued, as 0020 stamped the whole
/// ledger's with its one moment (but a sale a night recorded meanwhile: the clock, after that
/// night's events): an export as of a later time was refused until it finished, so an export as
/// of any time lists all of it or none of it, and is made again byte for byte.
public enum JournalFirstRecording {
    static let name = "journal_first_recording"

    /// What one call did.
    public struct Progress: Sendable, Equatable {
        /// Ledger rows looked at, by this call.
        public var rows = 0
        /// Journal events recorded, by this call.
        public var events = 0
        /// Whether the recording is done (also when none was owed).
        public var finished = false

        public init(rows: Int = 0, events: Int = 0, finished: Bool = false) {
            (self.rows, self.events, self.finished) = (rows, events, finished)
        }
    }

    /// Records the rest of the first recording, `chunk` ledger rows a transaction, stopping after
    /// `maxChunks` if given (a test's stand-in for a migrate stopped halfway). A thousand, as the
    /// backlog: a chunk holds its sales' locks until it commits, and a night recording the same
    /// sales waits for it.
    public static func resume(
        connection: PostgresConnection, chunk: Int = 1_000, maxChunks: Int? = nil, logger: Logger
    ) async throws -> Progress {
        var progress = Progress()
        var chunks = 0
        while maxChunks.map({ chunks < $0 }) ?? true {
            chunks += 1
            // A deadlock with a night's writer (a sale whose key changed, locked out of order) or a
            // lost connection: the chunk is rolled back whole with its cursor, and made again.
            let step = try await DatabaseRetry.run(logger: logger) { try await connection.withTransaction { connection -> (rows: Int, events: Int, done: Int64)? in
                // Locked, so two migrates take turns rather than record one chunk twice.
                guard let cursor = try await connection.query("""
                    SELECT after_key, done, date_trunc('milliseconds', queued_at) AS stamp
                    FROM iap.schema_backfills WHERE name = \(name) AND finished_at IS NULL FOR UPDATE
                    """).first else { return nil }
                let after = Cursor(try cursor.decode("after_key", as: String?.self))
                guard let page = try await Self.page(after: after, chunk: chunk, connection: connection) else {
                    try await connection.execute("UPDATE iap.schema_backfills SET finished_at = now() WHERE name = \(name)")
                    return (0, 0, try cursor.decode("done", as: Int64.self))
                }
                let (chained, last) = page
                let done = try cursor.decode("done", as: Int64.self) + Int64(chained.count)
                let events = try await FinanceJournal.record(chained, recordedAt: try cursor.decode("stamp"), connection: connection)
                try await connection.execute("UPDATE iap.schema_backfills SET after_key = \(last.text), done = \(done) WHERE name = \(name)")
                return (chained.count, events, done)
            } }
            guard let step else {
                progress.finished = true
                break
            }
            progress.rows += step.rows
            progress.events += step.events
            if step.rows == 0 {
                logger.notice("journal.first_recording_finished", metadata: ["ledger.rows": .stringConvertible(step.done)])
                progress.finished = true
                break
            }
            if chunks % 100 == 0 {
                logger.info("journal.first_recording", metadata: [
                    "ledger.rows": .stringConvertible(step.done), "journal.events": .stringConvertible(progress.events),
                ])
            }
        }
        return progress
    }

    /// Where the recording stands: past a chain (the ledger's rows in the order of their original
    /// transaction id, through its index), then, once every chain is done, past a transaction of
    /// the rows that name no original, in transaction id order. Kept as `c:ID` or `t:ID`.
    enum Cursor {
        case start
        case afterChain(String)
        case afterTransaction(String)

        init(_ text: String?) {
            switch text {
            case let text? where text.hasPrefix("c:"): self = .afterChain(String(text.dropFirst(2)))
            case let text? where text.hasPrefix("t:"): self = .afterTransaction(String(text.dropFirst(2)))
            default: self = .start
            }
        }

        var text: String {
            switch self {
            case .start: ""
            case .afterChain(let chain): "c:" + chain
            case .afterTransaction(let id): "t:" + id
            }
        }
    }

    /// The next chunk's rows and the cursor past them: about `chunk` rows of whole chains (the last
    /// chain taken whole, however long: a chain is never cut, so a restored copy is looked at with
    /// its purchase and each row once), else of the rows that name no original. Nil when done.
    static func page(after: Cursor, chunk: Int, connection: PostgresConnection) async throws -> (ids: [String], last: Cursor)? {
        if case .afterTransaction = after {} else {
            let rows = switch after {
            case .afterChain(let chain): try await connection.query("""
                SELECT transaction_id, original_transaction_id FROM iap.transactions
                WHERE original_transaction_id > \(chain) ORDER BY original_transaction_id LIMIT \(chunk)
                """)
            default: try await connection.query("""
                SELECT transaction_id, original_transaction_id FROM iap.transactions
                WHERE original_transaction_id IS NOT NULL ORDER BY original_transaction_id LIMIT \(chunk)
                """)
            }
            if let lastRow = rows.last {
                let chain: String = try lastRow.decode("original_transaction_id")
                var ids = Set(try rows.map { try $0.decode("transaction_id", as: String.self) })
                for row in try await connection.query("SELECT transaction_id FROM iap.transactions WHERE original_transaction_id = \(chain)") {
                    ids.insert(try row.decode("transaction_id"))
                }
                // A chain's first row that names no original of its own (an old row) is looked at
                // with the rows that name it, as the backlog does: a restored copy is never its sale.
                let chains = Set(try rows.map { try $0.decode("original_transaction_id", as: String.self) })
                for row in try await connection.query("""
                    SELECT transaction_id FROM iap.transactions WHERE transaction_id = ANY(\(chains.sorted())) AND original_transaction_id IS NULL
                    """) {
                    ids.insert(try row.decode("transaction_id"))
                }
                return (ids.sorted(), .afterChain(chain))
            }
        }
        let afterId = if case .afterTransaction(let id) = after { id } else { "" }
        let ids: [String] = try await connection.query("""
            SELECT t.transaction_id FROM iap.transactions t
            WHERE t.original_transaction_id IS NULL AND t.transaction_id > \(afterId)
              -- One that others name as their original went with them.
              AND NOT EXISTS (SELECT 1 FROM iap.transactions c WHERE c.original_transaction_id = t.transaction_id)
            ORDER BY t.transaction_id LIMIT \(chunk)
            """).map { try $0.decode("transaction_id") }
        guard let last = ids.last else { return nil }
        return (ids, .afterTransaction(last))
    }

    /// The first recording owed and not finished: when it was queued (to the millisecond: the
    /// time its events carry) and how many ledger rows it has looked at. An export as of that
    /// time or later would lack the events of the rest.
    public static func unfinished(connection: PostgresConnection) async throws -> (queuedAt: Date, done: Int64)? {
        guard let row = try await connection.query("""
            SELECT date_trunc('milliseconds', queued_at) AS queued_at, done FROM iap.schema_backfills
            WHERE name = \(name) AND finished_at IS NULL
            """).first else { return nil }
        return (try row.decode("queued_at"), try row.decode("done"))
    }
}

extension ReconciliationStore {
    /// `JournalFirstRecording.unfinished` on this session.
    public func journalFirstRecordingUnfinished() async throws -> (queuedAt: Date, done: Int64)? {
        try await JournalFirstRecording.unfinished(connection: connection)
    }
}
