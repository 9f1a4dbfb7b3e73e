import Foundation
import Logging
import Postgres
import SchemaMigrations
import Testing
import TestSupport
@testable import WorldSupport

/// `prune` through the executable (docs/operating.md, "Retention").
@Suite struct PruneCLITests {
    /// `--before` 180 days ago at the least (exit 2 and nothing deleted otherwise); `--dry-run`
    /// counts and deletes nothing; then the rows `RetentionFixture` names go and no other.
    @Test func pruneDeletesOnlyWhatNothingNeedsAndCountsItFirst() async throws {
        let database = try await TestDatabase.create("prunecli")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        try await RetentionFixture.fill(connection)
        let all = try await RetentionFixture.left(connection)
        let environment = ["DATABASE_URL": database.connectionString]

        let recent = ISO8601DateFormatter().string(from: Date().addingTimeInterval(-170 * 86_400))
        let tooRecent = try await CLIProcess.run(["prune", "--before", recent], environment: environment)
        #expect(tooRecent.status == 2 && tooRecent.stderr.contains("at least 180 days ago"), "\(tooRecent.stderr)")
        let notADate = try await CLIProcess.run(["prune", "--before", "last spring"], environment: environment)
        #expect(notADate.status == 2 && notADate.stderr.contains("--before"), "\(notADate.stderr)")

        let counted = try await CLIProcess.run(["prune", "--before", "2026-06-01", "--dry-run"], environment: environment)
        #expect(counted.status == 0, "\(counted.stderr)")
        #expect(counted.stdout.contains("Would prune 4 notification(s) and 2 correction(s) older than 2026-06-01"), "\(counted.stdout)")
        #expect(try await RetentionFixture.left(connection) == all)

        let pruned = try await CLIProcess.run(["prune", "--before", "2026-06-01"], environment: environment)
        #expect(pruned.status == 0, "\(pruned.stderr)")
        #expect(pruned.stdout.contains("Pruned 4 notification(s) and 2 correction(s)"), "\(pruned.stdout)")
        #expect(pruned.stderr.contains("prune.done"), "\(pruned.stderr)")
        let left = try await RetentionFixture.left(connection)
        #expect(left.corrections.count == all.corrections.count - 2 && !left.corrections.contains("old dry run's"))
        #expect(left.notifications.count == all.notifications.count - 4 && left.notifications.contains("old V2 answered"))
        await connection.close()
        try await database.drop()
    }
}
