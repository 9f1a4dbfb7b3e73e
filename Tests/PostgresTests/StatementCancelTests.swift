import Foundation
import Postgres
import Testing
import TestSupport

/// A statement a cancelled task waits on is cancelled on the server (docs/operating.md, "Stopping
/// a statement"), seen from another session in `pg_stat_activity`.
@Suite struct StatementCancelTests {
    /// The grace (half a second) and the cancel's round trip, by the server's own clock: when the
    /// backend left the statement (`state_change`), not when a loaded test runner next looked.
    static let limit: TimeInterval = isSanitizedRun ? 3 : 1

    /// Waits until `backend` runs a statement containing `marker`.
    func waitUntilRunning(_ backend: Int32, _ marker: String, observer: PostgresConnection) async throws {
        try await waitUntil("backend \(backend) runs the statement marked \(marker)", timeout: .seconds(30)) {
            try await observer.query("""
                SELECT count(*) AS n FROM pg_stat_activity WHERE pid = \(backend) AND state = 'active' AND strpos(query, \(marker)) > 0
                """)[0].decode("n", as: Int.self) > 0
        }
    }

    /// Waits until `backend` no longer runs the statement marked `marker`; returns the seconds from
    /// `since` to when the server says it stopped.
    func secondsUntilStopped(_ backend: Int32, _ marker: String, since: Date, observer: PostgresConnection) async throws -> TimeInterval {
        var stopped: Date?
        try await waitUntil("backend \(backend) no longer runs the statement marked \(marker)", timeout: .seconds(90)) {
            let rows = try await observer.query("""
                SELECT state_change FROM pg_stat_activity WHERE pid = \(backend) AND NOT (state = 'active' AND strpos(query, \(marker)) > 0)
                """)
            stopped = try rows.first?.decode("state_change", as: Date.self)
            return stopped != nil
        }
        return stopped.map { $0.timeIntervalSince(since) } ?? .infinity
    }

    @Test func aCancelledTaskCancelsTheSleepItWaitsOn() async throws {
        let observer = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let backend = try await connection.backendProcessID()
        let waiting = Task { try await connection.query("SELECT pg_sleep(60) AS marker_sleep_1") }
        try await waitUntilRunning(backend, "marker_sleep_1", observer: observer)
        let cancelledAt = Date()
        waiting.cancel()
        let gone = try await secondsUntilStopped(backend, "marker_sleep_1", since: cancelledAt, observer: observer)
        #expect(gone < Self.limit, "the server still ran the statement \(gone) s after the task was cancelled")
        do {
            _ = try await waiting.value
            Issue.record("a cancelled pg_sleep(60) returned rows")
        } catch let error as PostgresError {
            #expect(error.isStatementCancelled, "\(error)")
        }
        // The connection goes on serving its next statements.
        #expect(try await connection.query("SELECT 1 AS one")[0].decode("one", as: Int.self) == 1)
    }

    /// A lock wait inside a transaction: cancelled, the transaction rolled back, nothing of it written.
    @Test func aCancelledTaskCancelsItsLockWaitAndItsTransactionIsRolledBack() async throws {
        let table = "rr_cancel_\(UInt32.random(in: 0...UInt32.max))"
        let holder = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        // Not the holder: a session reads pg_stat_activity once per transaction.
        let observer = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        try await holder.execute("CREATE TABLE \(unescaped: table) (id int PRIMARY KEY, note text)")
        try await holder.execute("INSERT INTO \(unescaped: table) VALUES (1, 'before'), (2, 'before')")
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let backend = try await connection.backendProcessID()
        try await holder.execute("BEGIN")
        try await holder.execute("SELECT * FROM \(unescaped: table) WHERE id = 1 FOR UPDATE")
        let waiting = Task {
            try await connection.withTransaction { tx in
                try await tx.execute("UPDATE \(unescaped: table) SET note = 'written' WHERE id = 2")
                try await tx.execute("UPDATE \(unescaped: table) SET note = 'marker_lock_1' WHERE id = 1")
            }
        }
        try await waitUntilRunning(backend, "marker_lock_1", observer: observer)
        let cancelledAt = Date()
        waiting.cancel()
        let gone = try await secondsUntilStopped(backend, "marker_lock_1", since: cancelledAt, observer: observer)
        #expect(gone < Self.limit, "the server still waited \(gone) s after the task was cancelled")
        try await holder.execute("COMMIT")  // before awaiting the task: uncancelled, it waits for this
        await #expect(throws: PostgresError.self) { try await waiting.value }
        let notes = try await holder.query("SELECT note FROM \(unescaped: table) ORDER BY id").map { try $0.decode("note", as: String.self) }
        #expect(notes == ["before", "before"], "half of a cancelled transaction was written")
        try await holder.execute("DROP TABLE \(unescaped: table)")
    }

    /// A task that was cancelled already runs its later statements to the end: they are its cleanup.
    @Test func aTaskCancelledAlreadyRunsItsStatementsToTheEnd() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let task = Task {
            try? await Task.sleep(for: .seconds(60))  // ends at once when cancelled
            return try await connection.query("SELECT true AS slept FROM pg_sleep(1)")
        }
        task.cancel()
        let rows = try await task.value
        #expect(try rows[0].decode("slept", as: Bool.self))
    }

    /// What must land is never cancelled: a statement run `uncancelled` (a run's ending) goes on
    /// to the end though its task is cancelled while it runs.
    @Test func anUncancelledStatementRunsToTheEndThoughItsTaskIsCancelled() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.adminConnectionString)
        let task = Task { try await PostgresConnection.uncancelled { try await connection.query("SELECT true AS slept FROM pg_sleep(1.5)") } }
        try await Task.sleep(for: .milliseconds(100))
        task.cancel()
        #expect(try await task.value[0].decode("slept", as: Bool.self))
    }
}
