import Foundation
import Logging
import Postgres
import SchemaMigrations
@testable import Storage
import Testing
import TestSupport

/// The journal's first recording beside a night that records the same sale (docs/database.md,
/// "Migrations on a big database"): the recording read the ledger row before the night's refund
/// committed, then waited for the sale's lock; it reads the row again once it holds it, and so
/// sees the refund with its event. Read only before, it took the recorded refund for one the
/// ledger no longer shows and reversed it: money back in the books that never came back.
@Suite struct JournalFirstRecordingRaceTests {
    @Test func aRefundANightRecordsWhileTheRecordingWaitsIsNotReversed() async throws {
        let database = try await TestDatabase.create("firstrecordingrace")
        let (recording, night, watcher) = (try await database.connect(), try await database.connect(), try await database.connect())
        try await Migrator(logger: .quiet).migrate(recording)
        try await recording.executeScript("""
            INSERT INTO iap.products (product_id, type, price, currency) VALUES ('coins.100', 'consumable', 0.99, 'EUR');
            INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, quantity, environment)
            VALUES ('t1', 'ana', 't1', 'coins.100', '2026-10-01 10:00Z', 1, 'Production');
            INSERT INTO iap.schema_backfills (name) VALUES ('journal_first_recording');
            """)
        // The night: Apple's refund written and recorded, its transaction still open.
        try await night.execute("BEGIN")
        try await night.execute("UPDATE iap.transactions SET cancellation_date = '2026-10-02 10:00Z', cancellation_reason = 0 WHERE transaction_id = 't1'")
        #expect(try await FinanceJournal.record(["t1"], connection: night) == 2)

        let pid = try await recording.query("SELECT pg_backend_pid() AS pid")[0].decode("pid", as: Int32.self)
        let first = Task { try await JournalFirstRecording.resume(connection: recording, chunk: 10, logger: .quiet) }
        // The recording has read the row and waits for the sale's lock.
        var waiting = false
        for _ in 0..<200 where !waiting {
            waiting = try await watcher.query("SELECT count(*) AS n FROM pg_locks WHERE pid = \(pid) AND locktype = 'advisory' AND NOT granted")[0]
                .decode("n", as: Int.self) > 0
            if !waiting { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(waiting)
        try await night.execute("COMMIT")
        let done = try await first.value
        #expect(done.finished && done.rows == 1 && done.events == 0)
        let events = try await watcher.query("SELECT event, amount_milliunits FROM iap.finance_journal ORDER BY id").map {
            "\(try $0.decode("event", as: String.self)) \(try $0.decode("amount_milliunits", as: Int64.self))"
        }
        #expect(events == ["purchase 990", "refund -990"])
        for session in [recording, night, watcher] { await session.close() }
        try await database.drop()
    }
}
