import Foundation
import Postgres
import SchemaMigrations
import Testing
import TestSupport

/// Migration 0033 (docs/reports.md, "Reports"): a run stored before it, whose summary said
/// `correctionsAdopted`, reads as `correctionsTakenOver` after `migrate`, its count kept, through
/// `report`; a summary without the old key is left as it was.
@Suite struct SummaryNamingMigrationTests {
    @Test func migrateRenamesTheTakenOverCountInEveryStoredRun() async throws {
        let database = try await TestDatabase.create("summary-rename")
        let connection = try await database.connect()
        try await Migrator(migrations: Migration.bundled.filter { $0.version < "0033" }, logger: .quiet).migrate(connection)
        // Run 1 as an older binary stored it (every key its summary had then, the old name among them); run 2 without the key.
        let old = try String(contentsOf: TestPaths.repositoryRoot.appending(path: "Tests/Fixtures/reports/summary-before-0033.json"), encoding: .utf8)
        try await connection.execute("""
            INSERT INTO iap.reconciliation_runs (kind, status, dry_run, started_at, finished_at, statistics)
            VALUES ('nightly', 'completed', false, '2026-11-01 02:00Z', '2026-11-01 02:10Z', \(old)::jsonb),
                   ('nightly', 'failed', false, '2026-11-02 02:00Z', '2026-11-02 02:01Z', '{"runId": 2}')
            """)
        let migrate = try await CLIProcess.run(["migrate"], environment: ["DATABASE_URL": database.connectionString])
        #expect(migrate.status == 0, "\(migrate.stderr)")
        let rows = try await connection.query("""
            SELECT statistics ->> 'correctionsTakenOver' AS taken_over, statistics ? 'correctionsAdopted' AS old_key, statistics::text AS text
            FROM iap.reconciliation_runs ORDER BY id
            """)
        #expect(try rows[0].decode("taken_over", as: String?.self) == "7" && rows[0].decode("old_key", as: Bool.self) == false)
        #expect(try rows[1].decode("text", as: String.self) == #"{"runId": 2}"#)
        let report = try await CLIProcess.run(["report", "1", "--format", "json"], environment: ["DATABASE_URL": database.connectionString])
        #expect(report.status == 0, "\(report.stderr)")
        let object = try JSONSerialization.jsonObject(with: Data(report.stdout.utf8)) as? [String: Any]
        #expect(object?["correctionsTakenOver"] as? Int == 7 && object?["correctionsAdopted"] == nil, "\(report.stdout.prefix(500))")
        #expect(object?["pollingBlindSpots"] is String && object?["polling_blind_spots"] == nil)
        // An older build still running while a newer one migrated writes the old name again: still read.
        let writeBack = try await database.connect()
        try await writeBack.execute("""
            UPDATE iap.reconciliation_runs SET statistics = (statistics - 'correctionsTakenOver') || '{"correctionsAdopted": 4}' WHERE id = 1
            """)
        await writeBack.close()
        let again = try await CLIProcess.run(["report", "1", "--format", "json"], environment: ["DATABASE_URL": database.connectionString])
        let reread = try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [String: Any]
        #expect(again.status == 0 && reread?["correctionsTakenOver"] as? Int == 4, "\(again.stderr)")
    }
}
