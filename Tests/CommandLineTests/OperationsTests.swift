import AppStoreModels
import Foundation
import Jobs
import Postgres
import Reconciliation
import Storage
import Testing
import TestSupport
@testable import WorldSupport

/// The job as cron runs it: a real process, real signals, real exit statuses.
@Suite struct OperationsTests {
    @Test func theLockRefusesASecondRun() async throws {
        try await RunWorld.with("lock") { world in
            try await RunWorld.populate(world, count: 3)
            let holder = try await world.database.connect()
            #expect(try await RunLock.tryAcquire(holder, shard: nil))
            let refused = try await CLIProcess.run(["run", "--report-dir", world.reportRoot.path], environment: RunWorld.environment(world))
            #expect(refused.status == 4)
            #expect(refused.stderr.contains("another run holds the lock"))
            // A shard worker is refused too while an unsharded run holds it.
            let shard = try await CLIProcess.run(["run", "--shard", "0/2", "--report-dir", world.reportRoot.path], environment: RunWorld.environment(world))
            #expect(shard.status == 4)
            // The hourly notifications pass during a night is refused as any run is (the schedules
            // take its 4: docs/operating.md, "Sizing"), and so is a manual backfill; nothing written.
            let pass = try await CLIProcess.run(["backfill", "--notifications-only", "--report-dir", world.reportRoot.path],
                                                environment: RunWorld.environment(world))
            #expect(pass.status == 4, "\(pass.stderr)")
            let backfill = try await CLIProcess.run(["backfill", "--all", "--report-dir", world.reportRoot.path], environment: RunWorld.environment(world))
            #expect(backfill.status == 4)
            #expect(try await world.count("SELECT count(*) FROM iap.reconciliation_runs") == 0)
            await holder.close()
            try await waitUntil("the server released the closed session's lock") {
                try await world.count("""
                    SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
                      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    """) == 0
            }
            let allowed = try await CLIProcess.run(["run", "--report-dir", world.reportRoot.path], environment: RunWorld.environment(world))
            #expect(allowed.status == 0, "\(allowed.stderr)")
            #expect(allowed.stdout.contains("accounts: 3 processed"))
        }
    }

    @Test func twoShardsTogetherEqualOneRun() async throws {
        let now = Date()
        try await RunWorld.with("shards", now: now) { sharded in
            try await RunWorld.with("whole", now: now) { whole in
                try await RunWorld.populate(sharded, count: 60)
                try await RunWorld.populate(whole, count: 60)
                func shardOptions(_ index: Int) -> RunOptions {
                    var options = sharded.options()
                    options.selection.shard = Shard(index, of: 2)
                    return options
                }
                async let first = sharded.run(shardOptions(0))
                async let second = sharded.run(shardOptions(1))
                let (a, b) = try await (first, second)
                #expect(a.ending == .completed && b.ending == .completed)
                #expect(a.summary.accountsProcessed > 0 && b.summary.accountsProcessed > 0)
                #expect(a.summary.accountsProcessed + b.summary.accountsProcessed == 60)
                let (single, _) = try await whole.run(whole.options())
                #expect(single.accountsProcessed == 60)
                #expect(try await RunWorld.appliedCorrections(sharded) == RunWorld.appliedCorrections(whole))
                #expect(try await sharded.count("SELECT count(*) FROM iap.app_receipts WHERE last_run_id IS NULL") == 0)
            }
        }
    }

    /// SIGTERM (systemd, Kubernetes) and SIGINT (Ctrl-C), from a parent that blocks every
    /// signal (a test runner) and from one that blocks none (a shell, cron).
    @Test(arguments: [(SIGTERM, false), (SIGTERM, true), (SIGINT, true)])
    func aStopSignalFinishesInFlightWorkAndEndsInterrupted(signal: Int32, parentBlocksNoSignal: Bool) async throws {
        // Apple answers 40 requests, then holds the rest until the test has signalled: the run
        // cannot end before the signal however slow the machine (a loaded one once let it finish
        // all 300 accounts first, when the run's length came from Apple's latency).
        try await RunWorld.with("sigterm", scenario: ["hold_after_requests": 40]) { world in
            let accounts = 300
            try await RunWorld.populate(world, count: accounts)
            // Nothing stored: each lapsed account is a revoke the limit counts; the limit is not this test's subject.
            let cli = try CLIProcess(["run", "--concurrency", "4", "--batch-size", "10", "--max-revoke-ratio", "1", "--report-dir", world.reportRoot.path],
                                     environment: RunWorld.environment(world), parentBlocksNoSignal: parentBlocksNoSignal)
            // Signal once the run has committed its first batches.
            try await waitUntil("the run committed 30 accounts") {
                try await world.count("SELECT COALESCE(max(accounts_processed), 0) FROM iap.reconciliation_runs") >= 30
            }
            cli.signal(signal)
            // The signal is taken on a thread of its own: once the run says so, the held requests may go on.
            try await waitUntil("the run heard the signal") { cli.standardErrorSoFar.contains("run.signal=") }
            try await world.simulator.release()
            let result = try await cli.wait()
            #expect(result.status == 1, "\(result.stderr.suffix(4000))")
            #expect(result.stdout.contains("interrupted"))
            #expect(result.stderr.contains("run.signal=\(signal == SIGTERM ? "SIGTERM" : "SIGINT")"))
            let run = try await world.connection.query("SELECT status, accounts_processed FROM iap.reconciliation_runs")
            #expect(try run[0].decode("status", as: String.self) == "interrupted")
            let processed: Int = try run[0].decode("accounts_processed")
            #expect(processed > 0 && processed < accounts)
            // What was verified was committed and applied; nothing half-done is left planned.
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_verified_at IS NOT NULL") == processed)
            #expect(try await world.count("SELECT count(*) FROM iap.corrections WHERE status = 'planned'") == 0)
            #expect(try await world.count("SELECT count(DISTINCT account_id) FROM iap.corrections WHERE status = 'applied'") == processed)
            // The process did not die: it took back the marks of the accounts it read and did not finish.
            #expect(try await world.count("SELECT count(*) FROM iap.unfinished_accounts") == 0)
        }
    }

    /// A command that does not handle stop signals (here the simulator) is ended by them, as any
    /// process is, whether its parent blocked them or not.
    @Test(arguments: [false, true]) func aCommandThatIsNotARunEndsBySIGTERM(parentBlocksNoSignal: Bool) async throws {
        let cli = try CLIProcess(["simulate-apple", "--port", "0"], environment: [:], parentBlocksNoSignal: parentBlocksNoSignal)
        try await waitUntil("the simulator listens") { cli.standardOutputSoFar.contains("\n") }
        cli.signal(SIGTERM)
        let ended = try await cli.wait(timeout: .seconds(60))
        #expect(cli.process.terminationReason == .uncaughtSignal && ended.status == SIGTERM, "\(ended.stderr)")
    }

    @Test func sigkillThenRerunGivesExactlyTheCorrectionsOfAnUndisturbedRun() async throws {
        let now = Date()
        try await RunWorld.with("sigkill", now: now) { killed in
            try await RunWorld.with("calm", now: now) { calm in
                // Each kill lands once a run has committed 20 accounts, while the simulator holds
                // its requests after the 40th: the run is long by construction, not by latency.
                try await RunWorld.populate(killed, count: 300)
                try await RunWorld.populate(calm, count: 300)
                // Nothing stored: each lapsed account is a revoke the limit counts; the limit is not this test's subject.
                let arguments = ["run", "--concurrency", "4", "--batch-size", "7", "--max-revoke-ratio", "1", "--report-dir", killed.reportRoot.path]
                for round in 1...2 {
                    try await RunWorld.killOnceCommitted(arguments, environment: RunWorld.environment(killed), world: killed, run: round)
                }
                try await killed.simulator.release()
                let rerun = try await CLIProcess.run(arguments, environment: RunWorld.environment(killed))
                #expect(rerun.status == 0, "\(rerun.stderr)")
                #expect(try await killed.count("SELECT count(*) FROM iap.reconciliation_runs WHERE status = 'interrupted'") == 2)
                var calmOptions = calm.options()
                calmOptions.maximumRevokeRatio = 1  // as the killed runs: the limit is not this test's subject
                let (undisturbed, _) = try await calm.run(calmOptions)
                #expect(undisturbed.accountsProcessed == 300)
                let expected = try await RunWorld.appliedCorrections(calm)
                #expect(expected.count > 200)
                #expect(try await RunWorld.appliedCorrections(killed) == expected)
                #expect(try await killed.entitlements() == calm.entitlements())
                // Each run's committed batches (counted on its row in the same transaction) hold at
                // least the receipts it wrote last, and every account was last written by one run.
                // Only the accounts of a plan taken over were verified again (docs/guarantees.md,
                // "Interruptions, crashes and safety"): at most once by each of the two later runs.
                #expect(try await killed.count("SELECT count(*) FROM iap.app_receipts WHERE last_verified_at IS NULL") == 0)
                let runs = try await killed.connection.query("""
                    SELECT r.id, r.accounts_processed, (SELECT count(*) FROM iap.app_receipts a WHERE a.last_run_id = r.id)::int AS written
                    FROM iap.reconciliation_runs r ORDER BY r.id
                    """)
                #expect(runs.count == 3)
                var (total, written) = (0, 0)
                for run in runs {
                    let processed: Int = try run.decode("accounts_processed")
                    #expect(processed > 0)
                    let id: Int64 = try run.decode("id")
                    let last: Int = try run.decode("written")
                    #expect(last <= processed, "run \(id)")
                    total += processed
                    written += last
                }
                #expect(written == 300)
                let adopted = try await killed.count("""
                    SELECT count(DISTINCT account_id) FROM iap.corrections WHERE planned_by_run_id <> run_id
                    """)
                #expect(adopted > 0)
                #expect(total > 300 && total <= 300 + 2 * adopted, "\(total) accounts processed, \(adopted) taken over")
            }
        }
    }

    @Test func aStormOf21004StopsTheRunWithStatus2() async throws {
        try await RunWorld.with("secret") { world in
            try await RunWorld.populate(world, count: 40)
            let result = try await CLIProcess.run(["run", "--report-dir", world.reportRoot.path],
                                                  environment: RunWorld.environment(world, secret: "not-the-secret"))
            #expect(result.status == 2)
            #expect(result.stderr.contains("shared secret"))
            #expect(result.stderr.contains("APPLE_SHARED_SECRET"))
            #expect(!result.stderr.contains("not-the-secret") && !result.stdout.contains("not-the-secret"))
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements") == 0)
            // Rejected receipts are due again at once: the secret is this job's mistake, not theirs.
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE next_attempt_at IS NOT NULL") == 0)
        }
    }

    @Test func aRevokeRatioAbortExitsWith3() async throws {
        try await RunWorld.with("abortcli") { world in
            try await RunWorld.populate(world, count: 120)
            // Stored: every account entitled far into the future; Apple: a third have expired.
            try await world.connection.execute("""
                INSERT INTO iap.entitlements (account_id, product_id, original_transaction_id, state, entitled, expires_at, updated_at)
                SELECT account_id, 'pro.monthly', 'x', 'active', true, now() + interval '90 days', now() FROM iap.app_receipts
                """)
            let result = try await CLIProcess.run(["run", "--report-dir", world.reportRoot.path, "--metrics-file",
                                                   world.reportRoot.appending(path: "metrics.prom").path],
                                                  environment: RunWorld.environment(world))
            #expect(result.status == 3)
            #expect(result.stdout.contains("aborted"))
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements WHERE expires_at > now() + interval '80 days'") == 120)
            let metrics = try String(contentsOf: world.reportRoot.appending(path: "metrics.prom"), encoding: .utf8)
            #expect(metrics.contains("receipt_reconciler_last_run_status{kind=\"nightly\",status=\"aborted\"} 1"))
            #expect(!metrics.contains("receipt_reconciler_last_success_timestamp_seconds{"))
        }
    }

    @Test func reportOfAPastRun() async throws {
        try await RunWorld.with("reportcli") { world in
            try await RunWorld.populate(world, count: 5)
            let first = try await CLIProcess.run(["run", "--report-dir", world.reportRoot.path], environment: RunWorld.environment(world))
            #expect(first.status == 0)
            let markdown = try await CLIProcess.run(["report", "1"], environment: RunWorld.environment(world))
            #expect(markdown.stdout.contains("# Reconciliation run 1"))
            #expect(markdown.stdout.contains("| verified, corrected | 5 |") && markdown.stdout.contains("| **processed** | **5** |"))
            let json = try await CLIProcess.run(["report", "1", "--format", "json"], environment: RunWorld.environment(world))
            let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
            #expect((object?["outcomes"] as? [String: Int])?["verified"] == 5)
            let csv = try await CLIProcess.run(["report", "1", "--format", "csv"], environment: RunWorld.environment(world))
            #expect(csv.stdout.hasPrefix("correction_id,account_id"))
            #expect(csv.stdout.split(separator: "\r\n").count == 6)
            let missing = try await CLIProcess.run(["report", "99"], environment: RunWorld.environment(world))
            #expect(missing.status == 2)
        }
    }
}

/// The cron wrapper loads its environment file and runs the job with a dated report.
@Suite struct CronWrapperTests {
    @Test func wrapperRunsTheJobFromItsEnvironmentFile() async throws {
        try await RunWorld.with("cron") { world in
            try await RunWorld.populate(world, count: 4)
            let (data, envFile) = try Self.environmentFile(world)
            // The world's first night, on an empty iap.entitlements: the wrapper passes its arguments on.
            #expect(try await Self.runWrapper("cron/run-nightly.sh", arguments: ["--first-night"], environmentFile: envFile, data: data) == 0)
            let reports = try FileManager.default.contentsOfDirectory(atPath: data.appending(path: "reports").path)
            #expect(reports.count == 1)
            #expect(FileManager.default.fileExists(atPath: data.appending(path: "reports/\(reports[0])/summary.md").path))
            let metrics = try String(contentsOf: data.appending(path: "metrics/receipt_reconciler.prom"), encoding: .utf8)
            #expect(metrics.contains("receipt_reconciler_last_success_timestamp_seconds{kind=\"nightly\"}"))
            #expect(metrics.contains("receipt_reconciler_last_run_accounts{kind=\"nightly\",outcome=\"verified\"} 4"))
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements") == 4)
        }
    }

    /// The notifications' own hourly schedule: `cron/process-notifications.sh` processes what the
    /// app server stored since the night, with a dated report and metrics in a file of their own
    /// (the night's file keeps the night's figures).
    @Test func theNotificationsWrapperProcessesWhatWasStoredSinceTheNight() async throws {
        try await RunWorld.with("cron-notifications") { world in
            try await RunWorld.populate(world, count: 2)
            let (data, envFile) = try Self.environmentFile(world)
            #expect(try await Self.runWrapper("cron/run-nightly.sh", arguments: ["--first-night"], environmentFile: envFile, data: data) == 0)
            try await V1Notifications.store(world, [V1Notifications.notification("DID_CHANGE_RENEWAL_STATUS", password: world.secret, original: "no-such-original")])
            #expect(try await world.count("SELECT count(*) FROM iap.notifications WHERE outcome IS NULL") == 1)
            #expect(try await Self.runWrapper("cron/process-notifications.sh", environmentFile: envFile, data: data) == 0)
            // It names no account stored yet: unmatched, kept for when its account appears.
            #expect(try await world.count("""
                SELECT count(*) FROM iap.notifications n JOIN iap.reconciliation_runs r ON r.id = n.run_id
                WHERE n.outcome = 'unmatched' AND r.kind = 'backfill'
                """) == 1)
            #expect(try await world.count("SELECT count(*) FROM iap.reconciliation_runs WHERE kind = 'backfill' AND status = 'completed'") == 1)
            let reports = try FileManager.default.contentsOfDirectory(atPath: data.appending(path: "reports/notifications").path)
            #expect(reports.count == 1)
            #expect(FileManager.default.fileExists(atPath: data.appending(path: "reports/notifications/\(reports[0])/summary.md").path))
            let metrics = try String(contentsOf: data.appending(path: "metrics/receipt_reconciler_notifications.prom"), encoding: .utf8)
            #expect(metrics.contains("receipt_reconciler_last_success_timestamp_seconds{kind=\"backfill\"}"))
            let night = try String(contentsOf: data.appending(path: "metrics/receipt_reconciler.prom"), encoding: .utf8)
            #expect(night.contains("receipt_reconciler_last_success_timestamp_seconds{kind=\"nightly\"}"))
        }
    }

    /// The world's settings in an environment file, as /etc/receipt-reconciler.env holds them,
    /// and the data directory the wrappers write to.
    static func environmentFile(_ world: RunWorld) throws -> (data: URL, file: URL) {
        let file = world.reportRoot.appending(path: "reconciler.env")
        try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
        try """
            DATABASE_URL='\(world.database.connectionString)'
            APPLE_SHARED_SECRET=\(world.secret)
            APPLE_PRODUCTION_URL=\(world.simulator.productionURL)
            APPLE_SANDBOX_URL=\(world.simulator.sandboxURL)
            """.write(to: file, atomically: true, encoding: .utf8)
        return (world.reportRoot.appending(path: "data"), file)
    }

    /// Runs a wrapper of `cron/` as cron or systemd starts it: bash, a bare PATH, the environment
    /// file and the data directory; returns its exit status.
    static func runWrapper(_ script: String, arguments: [String] = [], environmentFile: URL, data: URL) async throws -> Int32 {
        let process = Process()
        process.executableURL = URL(filePath: "/bin/bash")
        process.arguments = [TestPaths.repositoryRoot.appending(path: script).path] + arguments
        process.environment = [
            "PATH": "/usr/bin:/bin", "RECEIPT_RECONCILER_ENV": environmentFile.path,
            "RECEIPT_RECONCILER_BIN": TestPaths.binaries.appending(path: "receipt-reconciler").path, "RECEIPT_RECONCILER_DATA": data.path,
        ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        while process.isRunning { try await Task.sleep(for: .milliseconds(20)) }
        return process.terminationStatus
    }

    @Test func wrapperRefusesAMissingEnvironmentFile() async throws {
        let process = Process()
        process.executableURL = URL(filePath: "/bin/bash")
        process.arguments = [TestPaths.repositoryRoot.appending(path: "cron/run-nightly.sh").path]
        process.environment = ["PATH": "/usr/bin:/bin", "RECEIPT_RECONCILER_ENV": "/nonexistent/reconciler.env"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 2)
    }
}
