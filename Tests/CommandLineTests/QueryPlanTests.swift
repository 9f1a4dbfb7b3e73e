import Foundation
import CivilCalendar
import Postgres
import Testing
import TestSupport
@testable import WorldSupport

/// Every statement each command issues, planned over big tables (docs/database.md, "Planned on an
/// index"): PostgreSQL's auto_explain, loaded into every session of the test's database, logs each
/// plan to the server's log; none may read a whole `transactions`, `notifications`,
/// `app_receipts`, `entitlements` or `finance_journal`.
@Suite struct QueryPlanTests {
    typealias Answers = ConsumptionAnswerTests
    static let watched: Set = ["transactions", "notifications", "app_receipts", "entitlements", "finance_journal"]
    /// Partial indexes of a backlog: a scan of one reads the rows waiting, never the history (and
    /// the rejected notifications, every one of which `--retry-rejected` asks to examine again).
    static let bounded: Set = ["notifications_unprocessed_idx", "notifications_consumption_due_idx", "app_receipts_failing_idx",
                               "app_receipts_reverify_idx", "notifications_quarantined_idx", "notifications_rejected_idx"]
    /// What reads a whole table still, until its rework (issue 56): each entry names the start of
    /// its statement. The test fails when one of them is planned on an index (take it out) and
    /// when any other statement reads a whole table.
    static let notYet: Set<String> = [
        // The rolling plan classifies every account in one statement (issue 56, "Shards independent").
        "WITH receipts AS ( SELECT account_id, bool_or(reverify_requested_at IS NOT NULL)",
    ]

    @Test(.disabled(if: isSanitizedRun, "time: 40,000 accounts made, no concurrency to check")) func everyCommandIsPlannedOnAnIndex() async throws {
        guard let log = ProcessInfo.processInfo.environment["RR_PG_LOG"].map({ URL(filePath: $0) }) else {
            throw TestSetupError(description: "RR_PG_LOG is not set: run the tests with scripts/test, which starts PostgreSQL")
        }
        try await APIWorld.withAPIWorld("plans") { world, key in
            try await BigTables.fill(world, accounts: 40_000)
            // A CONSUMPTION_REQUEST waiting for the answering job, for a consumable in the ledger.
            // (An id the bulk accounts' transactions, 7..., 8... and 9..., never take.)
            try await Answers.ledger(world, "acct-00001", "60000001")
            try await Answers.consent(world, "acct-00001", true)
            _ = try await V2Notifications.ingest(world, [try Answers.request(Answers.transaction("60000001"), uuid: "plans")])
            for setting in ["session_preload_libraries = 'auto_explain'", "auto_explain.log_min_duration = 0",
                            "auto_explain.log_format = 'json'", "auto_explain.log_nested_statements = on"] {
                try await world.connection.execute(PostgresQuery(unsafeSQL: "ALTER DATABASE \(world.database.name) SET \(setting)"))
            }
            let offset = try FileManager.default.attributesOfItem(atPath: log.path)[.size] as? UInt64 ?? 0
            // The detector itself: a statement no index serves, in a new session, is found.
            let session = try await world.database.connect()
            _ = try await session.query("SELECT count(*) FROM iap.transactions WHERE quantity = 7")
            await session.close()

            let environment = Answers.environment(world, key: key)
            let flags = APIWorld.apiFlags(world, key: key)
            let report = { (name: String) in ["--report-dir", world.reportRoot.appending(path: name).path] }
            let commands: [[String]] = [
                ["run", "--window", "1h"] + flags + report("night"),
                ["backfill", "--account", "acct-00002"] + flags + report("account"),
                ["backfill", "--product", "pro.monthly", "--dry-run"] + flags + report("product"),
                ["backfill", "--since", ISO8601DateFormatter().string(from: world.now.addingTimeInterval(-600)), "--dry-run"] + flags + report("since"),
                ["backfill", "--notifications-only"] + flags + report("notifications"),
                ["backfill", "--retry-rejected"] + flags + report("rejected"),
                ["explain", "acct-00002"], ["explain", "bulk-00000042", "--json"],
                ["export-finance", "--from", "2025-01-01", "--to", "2027-01-01", "--output", world.reportRoot.appending(path: "f.csv").path],
                ["export-finance", "--by", "recorded", "--from", "2025-01-01", "--to", "2027-01-01",
                 "--output", world.reportRoot.appending(path: "r.csv").path],
                ["runs"], ["report", "latest", "--format", "json"],
                ["corrections", "--after", "0", "--limit", "10"],
                ["prune", "--before", Timestamp.day(Date().addingTimeInterval(-200 * 86_400)), "--dry-run"],
                ["prune", "--before", Timestamp.day(Date().addingTimeInterval(-200 * 86_400))],
            ]
            for command in commands {
                let result = try await CLIProcess.run(command, environment: environment)
                #expect(result.status == 0, "\(command.prefix(2)): \(result.stderr.suffix(600))")
            }
            let answered = try await Answers.answer(world)
            #expect(answered.status == 0, "\(answered.stderr.suffix(600))")
            #expect(try await Answers.outcomes(world) == ["plans": "sent"], "\(answered.stderr.suffix(1500))")

            let plans = try QueryPlans(log: log, from: offset)
            #expect(plans.plans.count > 300, "auto_explain logged \(plans.plans.count) plans")
            #expect(plans.unreadable == 0, "\(plans.unreadable) logged plans did not parse")
            let scans = plans.wholeTableScans(of: Self.watched, boundedIndexes: Self.bounded)
            #expect(scans.contains { $0.query.contains("quantity = 7") }, "the detector found no whole scan in a statement that must be one")
            let found = Dictionary(grouping: scans.filter { !$0.query.contains("quantity = 7") }) { $0.query }
            let unexpected = found.filter { entry in !Self.notYet.contains { entry.key.hasPrefix($0) } }
            #expect(unexpected.isEmpty, """
                whole-table reads: \(unexpected.map { "\($0.value.map { "\($0.scan.node) \($0.scan.relation) \($0.scan.index ?? "")" }) in \($0.value[0].query.prefix(400))" }.joined(separator: "\n"))
                """)
            for open in Self.notYet {
                #expect(found.keys.contains { $0.hasPrefix(open) }, "\(open) is planned on an index now: take it out of notYet")
            }
        }
    }
}
