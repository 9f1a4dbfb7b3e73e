import CivilCalendar
import Foundation
import Logging
import Postgres

/// What `prune --before` deletes (docs/operating.md, "Retention"): the rows of tables that only
/// grow and that nothing needs once they are old, swept by id a page at a time, each page a
/// statement of its own, so that no transaction grows with the table and a prune stopped anywhere
/// is simply run again. The finance journal is never pruned: it is append-only, by the database.
public enum Retention {
    /// What a prune deleted, or would delete (`dryRun`).
    public struct Pruned: Sendable, Equatable {
        /// Stored notifications: processed before the date, and none of these: quarantined,
        /// rejected (a corrected configuration looks at them again), or one a consumption answer
        /// names (or a copy of its body).
        public var notifications = 0
        /// Corrections of runs started before the date that never moved an entitlement: a dry
        /// run's, and those superseded. Applied corrections (the outbox, `explain`) and planned ones
        /// (kept for review after an abort) stay.
        public var corrections = 0

        public init(notifications: Int = 0, corrections: Int = 0) {
            (self.notifications, self.corrections) = (notifications, corrections)
        }
    }

    /// The youngest date a prune takes, in days before now: Apple's notification history reaches
    /// back 180 days, and a notification pruned within them could be read from it and stored
    /// again by a run catching up on it.
    public static let minimumAgeDays = 180

    /// The youngest date a prune takes at `now`.
    public static func youngest(now: Date = Date()) -> Date {
        now.addingTimeInterval(-Double(minimumAgeDays) * 86_400)
    }

    /// A date younger than `minimumAgeDays`.
    public struct TooRecent: Error, CustomStringConvertible {
        public var youngest: Date
        public init(youngest: Date) { self.youngest = youngest }
        public var description: String {
            "--before must be at least \(Retention.minimumAgeDays) days ago (Apple's notification history reaches back that far): "
                + "give \(Timestamp.day(youngest)) or earlier"
        }
    }

    public static func prune(
        before: Date, dryRun: Bool, now: Date = Date(), pageSize: Int = 10_000, connection: PostgresConnection, logger: Logger
    ) async throws -> Pruned {
        let youngest = youngest(now: now)
        guard before <= youngest else { throw TooRecent(youngest: youngest) }
        var pruned = Pruned()
        pruned.notifications = try await sweep("notifications", logger: logger) { after in
            try await connection.query(notificationsPage(before: before, after: after, pageSize: pageSize, dryRun: dryRun))
        }
        pruned.corrections = try await sweep("corrections", logger: logger) { after in
            try await connection.query(correctionsPage(before: before, after: after, pageSize: pageSize, dryRun: dryRun))
        }
        return pruned
    }

    /// Pages from the lowest id to the highest; each page's statement returns its last id and
    /// how many rows of it went.
    private static func sweep(
        _ table: String, logger: Logger, _ page: (Int64) async throws -> [PostgresRow]
    ) async throws -> Int {
        var (after, total, pages) = (Int64(0), 0, 0)
        while true {
            let row = try await page(after)[0]
            guard let last: Int64 = try row.decode("last") else { return total }
            total += try row.decode("pruned", as: Int.self)
            after = last
            pages += 1
            if pages % 100 == 0 {
                logger.info("prune.progress", metadata: ["prune.table": "\(table)", "prune.after_id": .stringConvertible(after),
                                                         "prune.rows": .stringConvertible(total)])
            }
        }
    }

    static func notificationsPage(before: Date, after: Int64, pageSize: Int, dryRun: Bool) -> PostgresQuery {
        """
        WITH page AS (SELECT id FROM iap.notifications WHERE id > \(after) ORDER BY id LIMIT \(pageSize)),
        prunable AS (
            SELECT n.id FROM iap.notifications n
            WHERE n.id IN (SELECT id FROM page) AND n.processed_at < \(before) AND n.quarantined_at IS NULL
              AND n.outcome IS DISTINCT FROM 'rejected'
              -- Months past any request's 12 hours: the answering job never looks at it again.
              AND NOT EXISTS (SELECT 1 FROM iap.consumption_answers a WHERE a.notification_id = n.id)
              AND (n.notification_uuid IS NULL
                   OR NOT EXISTS (SELECT 1 FROM iap.consumption_answers a WHERE a.notification_uuid = n.notification_uuid))
        ), gone AS (
            DELETE FROM iap.notifications WHERE NOT \(dryRun) AND id IN (SELECT id FROM prunable) RETURNING 1
        )
        SELECT (SELECT max(id) FROM page) AS last,
               CASE WHEN \(dryRun) THEN (SELECT count(*) FROM prunable) ELSE (SELECT count(*) FROM gone) END AS pruned
        """
    }

    static func correctionsPage(before: Date, after: Int64, pageSize: Int, dryRun: Bool) -> PostgresQuery {
        """
        WITH page AS (SELECT id FROM iap.corrections WHERE id > \(after) ORDER BY id LIMIT \(pageSize)),
        prunable AS (
            SELECT c.id FROM iap.corrections c JOIN iap.reconciliation_runs r ON r.id = c.run_id
            WHERE c.id IN (SELECT id FROM page) AND r.started_at < \(before) AND r.status <> 'running'
              AND ((r.dry_run AND c.status = 'planned') OR c.status = 'superseded')
        ), gone AS (
            DELETE FROM iap.corrections WHERE NOT \(dryRun) AND id IN (SELECT id FROM prunable) RETURNING 1
        )
        SELECT (SELECT max(id) FROM page) AS last,
               CASE WHEN \(dryRun) THEN (SELECT count(*) FROM prunable) ELSE (SELECT count(*) FROM gone) END AS pruned
        """
    }
}
