import Foundation
import CivilCalendar
import Logging
import Postgres
import SchemaMigrations
import Storage
import Testing
import TestSupport
@testable import WorldSupport

/// The journal's first recording through the executable (docs/database.md, "Migrations on a big
/// database"): while it is unfinished an export refuses to give figures that would lack events
/// (unless as of before it was queued); `migrate` finishes it and says so, once.
@Suite struct JournalFirstRecordingCLITests {
    @Test func anExportWaitsForTheFirstRecordingThatMigrateFinishes() async throws {
        let database = try await TestDatabase.create("firstrecordingcli")
        let connection = try await database.connect()
        try await Migrator(migrations: Migration.bundled.filter { $0.version < "0010" }, logger: .quiet).migrate(connection)
        try await OlderLedger.fill(connection, chains: 200)
        // The files applied, as by a migrate stopped before the recording began.
        try await Migrator(logger: .quiet).migrate(connection)
        let queuedAt = try #require(try await JournalFirstRecording.unfinished(connection: connection)).queuedAt
        let environment = ["DATABASE_URL": database.connectionString]
        let period = ["--from", "2025-01-01", "--to", "2027-01-01"]

        let refused = try await CLIProcess.run(["export-finance"] + period, environment: environment)
        #expect(refused.status == 2, "\(refused.stderr)")
        #expect(refused.stderr.contains("first recording") && refused.stderr.contains("receipt-reconciler migrate"), "\(refused.stderr)")
        #expect(refused.stdout.isEmpty)
        // As of before it was queued, the export is what it was then: nothing recorded yet.
        let before = try await CLIProcess.run(
            ["export-finance", "--as-of", Timestamp.format(queuedAt.addingTimeInterval(-1))] + period, environment: environment)
        #expect(before.status == 0, "\(before.stderr)")
        #expect(before.stdout.components(separatedBy: "\r\n").filter { !$0.isEmpty }.count == 1, "\(before.stdout)")

        let migrate = try await CLIProcess.run(["migrate"], environment: environment)
        #expect(migrate.status == 0, "\(migrate.stderr)")
        // 200 purchases, 20 lifetime purchases, 1,800 renewals, 10 refunds: 2,030 events over 2,024 ledger rows.
        #expect(migrate.stdout.contains("Recorded 2030 finance journal event(s) over 2024 ledger row(s)"), "\(migrate.stdout)")
        #expect(migrate.stderr.contains("journal.first_recording_finished"), "\(migrate.stderr)")
        // The ten refunded rows given their cancellation's time as Apple's word's.
        #expect(migrate.stdout.contains("Gave 10 ledger row(s) their cancellation's time"), "\(migrate.stdout)")
        let export = try await CLIProcess.run(["export-finance"] + period, environment: environment)
        #expect(export.status == 0, "\(export.stderr)")
        #expect(export.stdout.components(separatedBy: "\r\n").filter { !$0.isEmpty }.count == 1 + 2_030)
        let again = try await CLIProcess.run(["migrate"], environment: environment)
        #expect(again.status == 0 && !again.stdout.contains("Recorded"), "\(again.stdout)")
        await connection.close()
        try await database.drop()
    }
}
