import Foundation
import Logging
import Postgres
import SchemaMigrations
import Storage
import Testing
import TestSupport

/// Retention (docs/operating.md, "Retention"), swept a page at a time: pages of one row, of a
/// few, and of more than the table delete the same rows, those `RetentionFixture` names, and a
/// dry run counts them first and deletes nothing.
@Suite struct RetentionTests {
    @Test(arguments: [1, 3, 10_000]) func pagesOfAnySizePruneTheSameRows(pageSize: Int) async throws {
        let database = try await TestDatabase.create("retention")
        let connection = try await database.connect()
        try await Migrator(logger: .quiet).migrate(connection)
        try await RetentionFixture.fill(connection)
        let before = try #require(ISO8601DateFormatter().date(from: "2026-06-01T00:00:00Z"))
        let all = try await RetentionFixture.left(connection)
        let expected = Retention.Pruned(notifications: RetentionFixture.prunedNotifications.count,
                                        corrections: RetentionFixture.prunedCorrections.count)

        let counted = try await Retention.prune(before: before, dryRun: true, pageSize: pageSize, connection: connection, logger: .quiet)
        #expect(counted == expected)
        #expect(try await RetentionFixture.left(connection) == all)

        let pruned = try await Retention.prune(before: before, dryRun: false, pageSize: pageSize, connection: connection, logger: .quiet)
        #expect(pruned == expected)
        let left = try await RetentionFixture.left(connection)
        #expect(left.corrections == all.corrections.filter { !RetentionFixture.prunedCorrections.contains($0) })
        #expect(left.notifications == all.notifications.filter { !RetentionFixture.prunedNotifications.contains($0) })
        #expect(try await Retention.prune(before: before, dryRun: false, pageSize: pageSize, connection: connection, logger: .quiet) == .init())
        // Within Apple's 180 days of notification history, nothing: a pruned one could come back.
        await #expect(throws: Retention.TooRecent.self) {
            try await Retention.prune(before: Date().addingTimeInterval(-170 * 86_400), dryRun: true, connection: connection, logger: .quiet)
        }
        await connection.close()
        try await database.drop()
    }
}
