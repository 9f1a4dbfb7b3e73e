import Foundation
import Logging
import Postgres

/// The finance journal's first recording over a ledger older than the journal (docs/database.md,
/// "Migrations on a big database"): `migrate` queues it (Migrations/0037) and makes it after the
/// files, a chunk of ledger rows a transaction in transaction id order. Each transaction records
/// its rows' events by the journal's own rules and moves the cursor with them, so no transaction
/// grows with the ledger and a migrate stopped anywhere resumes where it stopped.
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
    /// `maxChunks` if given (a test's stand-in for a migrate stopped halfway).
    public static func resume(
        connection: PostgresConnection, chunk: Int = 10_000, maxChunks: Int? = nil, logger: Logger
    ) async throws -> Progress {
        var progress = Progress()
        var chunks = 0
        while maxChunks.map({ chunks < $0 }) ?? true {
            chunks += 1
            let step = try await connection.withTransaction { connection -> (rows: Int, events: Int, done: Int64)? in
                // Locked, so two migrates take turns rather than record one chunk twice.
                guard let cursor = try await connection.query("""
                    SELECT after_key, done FROM iap.schema_backfills WHERE name = \(name) AND finished_at IS NULL FOR UPDATE
                    """).first else { return nil }
                let after: String? = try cursor.decode("after_key")
                let page = if let after {
                    try await connection.query("""
                        SELECT transaction_id FROM iap.transactions WHERE transaction_id > \(after) ORDER BY transaction_id LIMIT \(chunk)
                        """)
                } else {
                    try await connection.query("SELECT transaction_id FROM iap.transactions ORDER BY transaction_id LIMIT \(chunk)")
                }
                let ids: [String] = try page.map { try $0.decode("transaction_id") }
                let done = try cursor.decode("done", as: Int64.self) + Int64(ids.count)
                guard let last = ids.last else {
                    try await connection.execute("UPDATE iap.schema_backfills SET finished_at = now() WHERE name = \(name)")
                    return (0, 0, done)
                }
                let events = try await FinanceJournal.record(ids, connection: connection)
                try await connection.execute("UPDATE iap.schema_backfills SET after_key = \(last), done = \(done) WHERE name = \(name)")
                return (ids.count, events, done)
            }
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

    /// The first recording owed and not finished: when it was queued and how many ledger rows it
    /// has looked at. An export as of a later time would lack the events of the rest.
    public static func unfinished(connection: PostgresConnection) async throws -> (queuedAt: Date, done: Int64)? {
        guard let row = try await connection.query("""
            SELECT queued_at, done FROM iap.schema_backfills WHERE name = \(name) AND finished_at IS NULL
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
