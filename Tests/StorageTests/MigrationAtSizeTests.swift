import Foundation
import Logging
import Postgres
import SchemaMigrations
import Storage
import Testing
import TestSupport

/// Every migration applied to a database that already holds a ledger (docs/database.md,
/// "Migrations on a big database"): no table is rewritten, every check ends validated and every
/// index valid, and the journal's first recording is made in transactions of a bounded size,
/// resumable where it stopped, with the events a ledger of that shape owes, counted by hand.
/// The ledger is `OlderLedger`'s: 100,000 rows here (`RR_MIGRATION_LEDGER_ROWS` for more;
/// 2,000,000 is in BENCHMARKS.md).
@Suite struct MigrationAtSizeTests {
    static var ledgerRows: Int { Int(ProcessInfo.processInfo.environment["RR_MIGRATION_LEDGER_ROWS"] ?? "") ?? 100_000 }

    @Test func everyMigrationOverAFilledLedgerIsBoundedAndTheJournalIsRecordedOnce() async throws {
        let chains = max(100, Self.ledgerRows / OlderLedger.renewals)
        let database = try await TestDatabase.create("migrationatsize")
        let connection = try await database.connect()
        // The schema as it stood before the journal, signed data and consumption answers, filled.
        try await Migrator(migrations: Migration.bundled.filter { $0.version < "0010" }, logger: .quiet).migrate(connection)
        try await OlderLedger.fill(connection, chains: chains)
        let ledger = try await connection.query("SELECT count(*) AS n FROM iap.transactions")[0].decode("n", as: Int.self)
        #expect(ledger == OlderLedger.rows(chains: chains))
        func files() async throws -> [String: Int64] {
            var nodes: [String: Int64] = [:]
            for row in try await connection.query("""
                SELECT relname, relfilenode::bigint AS node FROM pg_class
                WHERE relnamespace = 'iap'::regnamespace AND relname IN ('transactions', 'notifications', 'products')
                """) { nodes[try row.decode("relname")] = try row.decode("node") }
            return nodes
        }
        let before = try await files()
        let clock = ContinuousClock()
        let started = clock.now
        let walStart: String = try await connection.query("SELECT pg_current_wal_lsn()::text AS lsn")[0].decode("lsn")

        try await Migrator(logger: .quiet).migrate(connection)
        let filesApplied = clock.now
        // No table rewritten (each would be a copy of it, holding it against every write).
        #expect(try await files() == before)
        #expect(try await connection.query("""
            SELECT conname FROM pg_constraint WHERE connamespace = 'iap'::regnamespace AND NOT convalidated
            """).isEmpty)
        #expect(try await connection.query("""
            SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = 'iap'::regnamespace AND NOT i.indisvalid
            """).isEmpty)
        // The files recorded nothing: the journal's first recording is queued for after them.
        #expect(try await connection.query("SELECT count(*) AS n FROM iap.finance_journal")[0].decode("n", as: Int.self) == 0)
        #expect(try await JournalFirstRecording.unfinished(connection: connection)?.done == 0)

        // Stopped after two chunks, it has recorded those and says how far it got; resumed, it ends.
        let chunk = min(1_000, max(100, ledger / 20))  // 1,000: what migrate takes
        let stopped = try await JournalFirstRecording.resume(connection: connection, chunk: chunk, maxChunks: 2, logger: .quiet)
        // Two chunks: a chunk's rows and the rest of its last chain (a chain is never cut).
        #expect(!stopped.finished && (2 * chunk...2 * chunk + 2 * (OlderLedger.renewals + 1)).contains(stopped.rows), "\(stopped)")
        #expect(try await JournalFirstRecording.unfinished(connection: connection)?.done == Int64(stopped.rows))
        let rest = try await JournalFirstRecording.resume(connection: connection, chunk: chunk, logger: .quiet)
        // Every ledger row once.
        #expect(rest.finished && rest.rows == ledger - stopped.rows)
        #expect(try await JournalFirstRecording.unfinished(connection: connection) == nil)
        if ProcessInfo.processInfo.environment["RR_MIGRATION_LEDGER_ROWS"] != nil {
            // The figures BENCHMARKS.md quotes, for a run at another size.
            let walBytes = try await connection.query("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), \(walStart)::pg_lsn)::bigint AS b")[0]
                .decode("b", as: Int64.self)
            print("migration at size: \(ledger) ledger rows; files \(filesApplied - started), first recording \(clock.now - filesApplied), "
                  + "WAL \(walBytes / 1_048_576) MB")
        }
        #expect(try await JournalFirstRecording.resume(connection: connection, logger: .quiet) == .init(rows: 0, events: 0, finished: true))
        // Every event at the one time it was queued: an export as of any time has all or none.
        #expect(try await connection.query("""
            SELECT count(DISTINCT j.recorded_at) AS times, bool_and(j.recorded_at = date_trunc('milliseconds', b.queued_at)) AS queued
            FROM iap.finance_journal j, iap.schema_backfills b WHERE b.name = 'journal_first_recording'
            """)[0].decode("queued", as: Bool.self))

        // The refunded rows, written before the ledger kept Apple's word's time, get their
        // cancellation's: a signed word older than the refund no longer clears it.
        #expect(try await LedgerCancellationTimes.resume(connection: connection, pageSize: chunk, logger: .quiet) == chains / 20)
        #expect(try await connection.query("""
            SELECT count(*) AS n FROM iap.transactions WHERE cancellation_date IS NOT NULL AND apple_as_of = cancellation_date
            """)[0].decode("n", as: Int.self) == chains / 20)
        #expect(try await LedgerCancellationTimes.resume(connection: connection, logger: .quiet) == 0)

        // What the ledger owes, by hand: a purchase a chain and a lifetime purchase every 10th
        // account at their prices, a renewal for each of the other transactions but the restored
        // copies (their sale is already recorded), a full refund every 20th chain.
        let refunds = chains / 20
        let events = try await connection.query("""
            SELECT event, count(*) AS n, sum(amount_milliunits)::bigint AS amount FROM iap.finance_journal GROUP BY event ORDER BY event
            """)
        let byEvent = try Dictionary(uniqueKeysWithValues: events.map {
            (try $0.decode("event", as: String.self), (try $0.decode("n", as: Int.self), try $0.decode("amount", as: Int64.self)))
        })
        #expect(byEvent.keys.sorted() == ["purchase", "refund", "renewal"])
        #expect(byEvent["purchase"].map { [$0.0, Int($0.1)] } == [chains + chains / 10, chains * 4_990 + chains / 10 * 29_990])
        #expect(byEvent["renewal"].map { [$0.0, Int($0.1)] } == [chains * (OlderLedger.renewals - 1), chains * (OlderLedger.renewals - 1) * 4_990])
        #expect(byEvent["refund"].map { [$0.0, Int($0.1)] } == [refunds, -refunds * 4_990])
        #expect(stopped.events + rest.events == byEvent.values.reduce(0) { $0 + $1.0 })

        // No transaction wrote more than a chunk's events (its rows' chains, twice their rows at
        // most: a purchase or renewal and a refund): the ledger's own size bounds none of them.
        let largest = try await connection.query("""
            SELECT max(n) AS n, count(*) AS transactions FROM (SELECT xmin, count(*) AS n FROM iap.finance_journal GROUP BY xmin) t
            """)[0]
        #expect(try largest.decode("n", as: Int.self) <= 2 * OlderLedger.renewals * chunk)
        // Many of them (a late chunk finds most chains it touches recorded already, and records little).
        #expect(try largest.decode("transactions", as: Int.self) >= 10)
        await connection.close()
        try await database.drop()
    }
}
