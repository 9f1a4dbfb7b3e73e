import AppStore
import AppStoreModels
import CivilCalendar
import Foundation
import Jobs
import Postgres
import Reconciliation
import Storage
import TestSupport
import Testing
@testable import WorldSupport

/// A rolling run (issue 28): accounts notifications made due first, then those at risk, then the
/// rest oldest-verified first, each at least once per full cycle, as many as the window holds at
/// the API budget; the report says what was left and when the cycle completes.
@Suite struct RollingScheduleTests {
    static let day: Int64 = 86_400_000

    /// Each kind of account once, with its last verification set by hand.
    static func world(_ body: (RunWorld) async throws -> Void) async throws {
        try await RunWorld.with("rolling") { world in
            func account(_ name: String, verifiedDaysAgo: Double?, original: String, endDays: Double = 20) async throws {
                try await world.addReceipt(name, spec: ["generate": ["subscriptions": [world.subscription(original: original, endDays: endDays)]]])
                if let days = verifiedDaysAgo {
                    try await world.connection.execute("""
                        UPDATE iap.app_receipts SET last_verified_at = now() - make_interval(secs => \(days * 86_400)) WHERE account_id = \(name)
                        """)
                }
                try await world.store(Entitlement(accountId: name, productId: "pro.monthly", originalTransactionId: original,
                                                  latestTransactionId: "\(original)000", state: .active,
                                                  expiresAt: world.expiry(endDays: endDays), environment: "Production"))
            }
            // Made due by a notification, though verified an hour ago.
            try await account("notified", verifiedDaysAgo: 1.0 / 24, original: "1")
            try await world.connection.execute("UPDATE iap.app_receipts SET reverify_requested_at = now() WHERE account_id = 'notified'")
            // At risk, verified 21 hours ago (past --stale-after, inside the cycle).
            try await account("risk-grace", verifiedDaysAgo: 0.875, original: "2")
            try await world.connection.execute("UPDATE iap.entitlements SET state = 'grace_period', entitled = true WHERE account_id = 'risk-grace'")
            try await account("risk-expiring", verifiedDaysAgo: 0.875, original: "3", endDays: 0.5)
            try await account("risk-refund", verifiedDaysAgo: 0.875, original: "4")
            try await world.connection.execute("""
                INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, expires_date,
                                              cancellation_date, cancellation_reason, environment)
                VALUES ('4000', 'risk-refund', '4', 'pro.monthly', now() - interval '10 days', now() + interval '20 days',
                        now() - interval '1 hour', 1, 'Production')
                """)
            // Not due: verified 21 hours ago and safe; or deferred to later.
            try await account("fresh", verifiedDaysAgo: 0.875, original: "5")
            try await account("deferred", verifiedDaysAgo: 9, original: "6")
            try await world.connection.execute("UPDATE iap.app_receipts SET next_attempt_at = now() + interval '1 hour' WHERE account_id = 'deferred'")
            // The full cycle: never verified, then the oldest first.
            try await account("never", verifiedDaysAgo: nil, original: "7")
            for (name, days, original) in [("old-8d", 8.0, "8"), ("old-9d", 9.0, "9"), ("old-10d", 10.0, "10"), ("old-11d", 11.0, "11")] {
                try await account(name, verifiedDaysAgo: days, original: original)
            }
            try await body(world)
        }
    }

    /// A window of 7 s at a history budget of 1 a second (half of 2) holds 7 / 1.1 = 6.4, so 6
    /// accounts (statuses: 7 / 0.9 = 7.8); no run measured the cost yet, so the first guess is used.
    static func options(_ world: RunWorld, window: Duration? = .seconds(7)) -> RunOptions {
        var options = world.options()
        options.rollingSchedule = RollingSchedule(fullCycle: .seconds(7 * 86_400), window: window)
        options.apiQuota = ServerAPIQuota(production: [.history: 2, .statuses: 2], sandbox: [:])
        return options
    }

    static func processed(_ world: RunWorld, run: Int64) async throws -> Set<String> {
        Set(try await world.connection.query("SELECT DISTINCT account_id FROM iap.app_receipts WHERE last_run_id = \(run)")
            .map { try $0.decode("account_id", as: String.self) })
    }

    @Test func theWindowTakesNotifiedThenAtRiskThenTheOldestAndSaysWhatIsLeft() async throws {
        try await Self.world { world in
            let (summary, ending) = try await world.run(Self.options(world))
            #expect(ending == .completed)
            let plan = try #require(summary.schedule)
            #expect(plan.capacity == 6)
            #expect(plan.due == [.notified: 1, .atRisk: 3, .cycle: 5], "\(plan.due)")
            #expect(plan.scheduled == [.notified: 1, .atRisk: 3, .cycle: 2], "\(plan.scheduled)")
            #expect(summary.accountsProcessed == 6)
            // The cycle's two: never verified first, then the one verified longest ago.
            #expect(try await Self.processed(world, run: summary.runId)
                == ["notified", "risk-grace", "risk-expiring", "risk-refund", "never", "old-11d"])
            // Three of the cycle are left; a night holds 6 - 1 - 3 = 2 of them: two nights.
            #expect(plan.leftForNextNight == 3)
            #expect(plan.fullCycleCompleteBy == summary.startedAt.addingTimeInterval(2 * 86_400))
            let markdown = try String(contentsOf: try #require(try world.lastReportDirectory()).appending(path: "summary.md"), encoding: .utf8)
            #expect(markdown.contains("## Tonight's plan"))
            #expect(markdown.contains("  left for the next night: 3; the full cycle (7d) completes by \(Timestamp.day(summary.startedAt.addingTimeInterval(2 * 86_400)))"))
            #expect(RunReport.short(summary).contains("plan: 6 of 9 due accounts (notified 1, at risk 3, full cycle 2); 3 left for the next night"))

            // The next night takes the rest of the cycle, oldest first (the at-risk ones were verified tonight).
            let (next, _) = try await world.run(Self.options(world))
            #expect(next.schedule?.scheduled[.cycle] == 3)
            #expect(try await Self.processed(world, run: next.runId) == ["old-8d", "old-9d", "old-10d"])
        }
    }

    @Test func withoutAWindowEveryDueAccountIsTakenInTheSameOrder() async throws {
        try await Self.world { world in
            let (summary, _) = try await world.run(Self.options(world, window: nil))
            #expect(summary.schedule?.capacity == nil)
            #expect(summary.schedule?.leftForNextNight == 0)
            #expect(summary.accountsProcessed == 9)
            #expect(try await !Self.processed(world, run: summary.runId).contains("fresh"))
            #expect(try await !Self.processed(world, run: summary.runId).contains("deferred"))
        }
    }

    /// `run --dry-run` through the API prints the plan (due by reason, requests per endpoint, time
    /// at the budget) before it asks Apple anything; --window without the API is refused.
    @Test func aDryRunPrintsThePlanFirst() async throws {
        let now = Date()
        let blobs = (0..<5).map { index in
            syntheticReceipt(["generate": ["subscriptions": [["product_id": "pro.monthly", "original_transaction_id": "\(20_000 + index)",
                                                             "renewals": 1, "start_ms": Int64(now.timeIntervalSince1970 * 1000) - 20 * Self.day,
                                                             "period_ms": 30 * Self.day]]]])
        }
        try await RunWorld.with("rolling-cli", scenario: ["api": ["from_receipts": blobs]]) { world in
            try await APIWorld.store(blobs, in: world)
            let key = FileManager.default.temporaryDirectory.appending(path: "rr-key-\(UUID().uuidString).p8")
            try Fixtures.privateKey(at: key)
            defer { try? FileManager.default.removeItem(at: key) }
            let environment = APIWorld.environment(world, key: key)
            let result = try await CLIProcess.run(
                ["run", "--dry-run", "--source", "server-api", "--window", "4h", "--bundle-id", "com.example.app",
                 "--apple-root-certificate", world.simulator.signingDirectory.appending(path: "root.der").path,
                 "--report-dir", world.reportRoot.appending(path: "dry").path], environment: environment)
            #expect(result.status == 0, "\(result.stderr)")
            let lines = result.stdout.split(separator: "\n").map(String.init)
            // Apple's production quota, half of it: 25 a second for 4 hours holds 327,272 accounts at 1.1 an account.
            #expect(lines.first == "Plan: 5 of 5 due accounts tonight (the window of 4h holds 327272 at the budget)", "\(result.stdout)")
            #expect(lines.contains("  by reason: notified 0 of 0, at risk 0 of 0, full cycle 5 of 5"))
            #expect(lines.contains { $0.hasPrefix("  App Store Server API requests: history ~6 (1.10 an account, budget 25.00/s), statuses ~5") })
            #expect(lines.contains("  time at the budget: 0s"))
            let run = try #require(lines.firstIndex { $0.hasPrefix("Run 1 (nightly, dry run)") }, "\(result.stdout)")
            #expect(run > 0)
            #expect(result.stdout.contains("plan: 5 of 5 due accounts"))

            let refused = try await CLIProcess.run(["run", "--source", "verify-receipt", "--window", "4h"], environment: environment)
            #expect(refused.status == 2)
            #expect(refused.stderr.contains("--window plans by the App Store Server API's budget"), "\(refused.stderr)")

            // The shipped schedules pass --window with or without the key: without it (and without
            // --source), a notice, no plan by a budget, and every due account verified.
            let unkeyed = try await CLIProcess.run(
                ["run", "--dry-run", "--window", "4h", "--report-dir", world.reportRoot.appending(path: "unkeyed").path],
                environment: RunWorld.environment(world))
            #expect(unkeyed.status == 0, "\(unkeyed.stderr)")
            #expect(unkeyed.stderr.contains("run.window_not_used"), "\(unkeyed.stderr)")
            #expect(!unkeyed.stdout.contains("Plan:"), "\(unkeyed.stdout)")
            #expect(try await world.count("""
                SELECT accounts_processed FROM iap.reconciliation_runs WHERE dry_run AND status = 'completed' ORDER BY id DESC LIMIT 1
                """) == 5)
            // Part of a key (its issuer and id, its file's variable misspelled) is a key meant: refused, not a night without the API.
            let partly = try await CLIProcess.run(
                ["run", "--dry-run", "--window", "4h", "--report-dir", world.reportRoot.appending(path: "partly").path],
                environment: RunWorld.environment(world).merging(["APPSTORE_ISSUER_ID": "issuer", "APPSTORE_KEY_ID": "KEY",
                                                                  "APPSTORE_PRIVATE_KEYFILE": key.path]) { $1 })
            #expect(partly.status == 2)
            #expect(partly.stderr.contains("only partly configured: set APPSTORE_PRIVATE_KEY_FILE"), "\(partly.stderr)")
        }
    }

    /// Shards plan apart: a run prunes the ended runs' plans in a statement of its own, skipping
    /// rows another shard holds (it never waits on them); whichever run comes next prunes those.
    @Test func aShardPrunesEndedPlansWithoutWaitingOnAnother() async throws {
        try await RunWorld.with("schedule-prune") { world in
            let store = ReconciliationStore(connection: world.connection)
            func run(_ shard: Shard?, ended: Bool) async throws -> Int64 {
                let id = try await store.createRun(kind: .nightly, isDryRun: false, startedAt: world.now.addingTimeInterval(-86_400),
                                                   shard: shard?.description, options: ["test": true])
                if ended {
                    try await world.connection.execute("UPDATE iap.reconciliation_runs SET status = 'completed' WHERE id = \(id)")
                    try await world.connection.execute("INSERT INTO iap.run_schedule (run_id, position, account_id, reason) VALUES (\(id), 1, 'a', 'cycle')")
                }
                return id
            }
            func planned(_ run: Int64) async throws -> Int { try await world.count("SELECT count(*) FROM iap.run_schedule WHERE run_id = \(run)") }
            func plan(_ run: Int64, _ shard: Shard?) async throws {
                _ = try await store.planSchedule(runId: run, shard: shard, now: world.now, staleAfter: .seconds(3600), fullCycle: .seconds(7 * 86_400),
                                                 atRiskUntil: world.now, capacity: nil)
            }
            let zero = try await run(Shard(0, of: 2), ended: true)
            let one = try await run(Shard(1, of: 2), ended: true)
            // Another session holds shard 1's ended plan, as shard 1's own pruning would while it plans.
            let holder = try await world.database.connect()
            try await holder.execute("BEGIN")
            _ = try await holder.query("SELECT * FROM iap.run_schedule WHERE run_id = \(one) FOR UPDATE")
            try await world.connection.execute("SET lock_timeout = '2s'")
            try await plan(try await run(Shard(0, of: 2), ended: false), Shard(0, of: 2))
            #expect(try await planned(zero) == 0)
            #expect(try await planned(one) == 1)
            try await holder.execute("ROLLBACK")
            await holder.close()
            try await plan(try await run(nil, ended: false), nil)
            #expect(try await planned(one) == 0)
        }
    }
}
