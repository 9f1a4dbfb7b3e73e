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

    /// The recording's events carry the time it was queued, but those of a sale a night recorded
    /// after that time: the clock, after the night's own, so no event of a sale is dated before
    /// the sale was.
    @Test func aSaleANightRecordedMeanwhileKeepsItsTimeOrder() async throws {
        let database = try await TestDatabase.create("firstrecordingstamp")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        try await connection.executeScript("""
            INSERT INTO iap.products (product_id, type, price, currency) VALUES ('coins.100', 'consumable', 0.99, 'EUR');
            INSERT INTO iap.schema_backfills (name, queued_at) VALUES ('journal_first_recording', now() - interval '1 hour');
            INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, cancellation_date,
                                          cancellation_reason, quantity, environment)
            VALUES ('quiet', 'ana', 'quiet', 'coins.100', '2026-10-01 10:00Z', NULL, NULL, 1, 'Production'),
                   ('night', 'ben', 'night', 'coins.100', '2026-10-01 10:00Z', '2026-10-02 10:00Z', 0, 1, 'Production');
            -- A night recorded the purchase half an hour ago, before the refund reached the ledger.
            INSERT INTO iap.finance_journal (event, event_time, recorded_at, account_id, product_id, product_type, transaction_id, amount_source,
                                             price_milliunits, currency, amount_milliunits, sale_key)
            VALUES ('purchase', '2026-10-01 10:00Z', date_trunc('milliseconds', now() - interval '30 minutes'), 'ben', 'coins.100',
                    'consumable', 'night', 'catalog', 990, 'EUR', 990, 'tx:night');
            """)
        let done = try await JournalFirstRecording.resume(connection: connection, logger: .quiet)
        #expect(done.finished && done.events == 2)
        let stamps = try await connection.query("""
            SELECT j.transaction_id || ' ' || j.event AS event,
                   j.recorded_at = date_trunc('milliseconds', b.queued_at) AS at_queued,
                   j.recorded_at > now() - interval '30 minutes' AS after_the_night
            FROM iap.finance_journal j, iap.schema_backfills b WHERE b.name = 'journal_first_recording' ORDER BY j.id
            """).map { "\(try $0.decode("event", as: String.self)) \(try $0.decode("at_queued", as: Bool.self)) \(try $0.decode("after_the_night", as: Bool.self))" }
        #expect(stamps == ["night purchase false false", "night refund false true", "quiet purchase true false"], "\(stamps)")
        await connection.close()
        try await database.drop()
    }
}
