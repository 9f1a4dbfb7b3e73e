import AppleSimulator
import Foundation
import Postgres
import Testing
import TestSupport
@testable import WorldSupport

/// A stop signal cancels the statement the process waits on (docs/operating.md, "Stopping a
/// statement"): the server shows it gone within a second, a run ends interrupted with whole
/// batches only, any other command ends by the signal.
@Suite struct StatementCancelCLITests {
    /// How long the server may go on after the signal, as a session polling every 20 ms beside a
    /// whole suite sees it: half a second of grace and the request's round trip, and however late
    /// a loaded runner looks (StatementCancelTests holds the server's own clock to a second).
    static let limit: Duration = isSanitizedRun ? .seconds(6) : .seconds(3)

    /// The job's sessions of `world` waiting on a lock now.
    static func lockWaits(_ world: RunWorld, observer: PostgresConnection) async throws -> Int {
        try await observer.query("""
            SELECT count(*) AS n FROM pg_stat_activity
            WHERE datname = \(world.database.name) AND application_name = 'receipt-reconciler' AND wait_event_type = 'Lock'
            """)[0].decode("n")
    }

    /// How long after now the job's lock waits in `world` are gone.
    static func lockWaitsGone(_ world: RunWorld, observer: PostgresConnection) async throws -> Duration {
        let clock = ContinuousClock()
        let start = clock.now
        while try await lockWaits(world, observer: observer) > 0 {
            if clock.now - start > .seconds(60) { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        return clock.now - start
    }

    @Test func aStopSignalCancelsTheLockWaitOfARunThatEndsInterruptedWithWholeBatches() async throws {
        try await RunWorld.with("cancel-run", scenario: ["hold_after_requests": 20]) { world in
            try await RunWorld.populate(world, count: 60)
            let cli = try CLIProcess(["run", "--concurrency", "2", "--batch-size", "10", "--report-dir", world.reportRoot.path],
                                     environment: RunWorld.environment(world))
            try await waitUntil("the run committed 20 accounts") {
                try await world.count("SELECT COALESCE(max(accounts_processed), 0) FROM iap.reconciliation_runs") >= 20
            }
            // Another session holds the receipts' table: the run's next batch waits on it.
            let holder = try await world.database.connect()
            try await holder.execute("BEGIN")
            try await holder.execute("LOCK TABLE iap.app_receipts IN SHARE MODE")
            try await world.simulator.release()
            try await waitUntil("the run waits on the lock") { try await Self.lockWaits(world, observer: world.connection) > 0 }
            cli.signal(SIGTERM)
            let gone = try await Self.lockWaitsGone(world, observer: world.connection)
            #expect(gone < Self.limit, "the run's statement still waited \(gone) after SIGTERM")
            try await holder.execute("COMMIT")
            let result = try await cli.wait()
            #expect(result.status == 1, "\(result.stderr.suffix(4000))")
            let run = try await world.connection.query("SELECT status, accounts_processed, error FROM iap.reconciliation_runs")
            #expect(try run[0].decode("status", as: String.self) == "interrupted")
            #expect(try run[0].decode("error", as: String?.self)?.contains("cancelled") == true)
            // Whole batches: every account the run's row counts was written, and no other.
            let processed: Int = try run[0].decode("accounts_processed")
            #expect(processed >= 20 && processed % 10 == 0 && processed < 60, "\(processed)")
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_verified_at IS NOT NULL") == processed)
            #expect(try await world.count("SELECT count(*) FROM iap.unfinished_accounts") == 0)
        }
    }

    @Test func aStopSignalCancelsTheStatementOfACommandThatEndsByIt() async throws {
        try await RunWorld.with("cancel-export") { world in
            let holder = try await world.database.connect()
            try await holder.execute("BEGIN")
            try await holder.execute("LOCK TABLE iap.finance_journal IN ACCESS EXCLUSIVE MODE")
            try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
            let output = world.reportRoot.appendingPathComponent("finance.csv")
            let cli = try CLIProcess(["export-finance", "--from", "2026-01-01", "--to", "2026-02-01", "--output", output.path],
                                     environment: RunWorld.environment(world))
            try await waitUntil("the export waits on the lock") {
                if !cli.process.isRunning { throw TestSetupError(description: "export-finance ended: \(cli.standardErrorSoFar)") }
                return try await Self.lockWaits(world, observer: world.connection) > 0
            }
            cli.signal(SIGTERM)
            let gone = try await Self.lockWaitsGone(world, observer: world.connection)
            #expect(gone < Self.limit, "the export's statement still waited \(gone) after SIGTERM")
            let ended = try await cli.wait(timeout: .seconds(60))
            #expect(cli.process.terminationReason == .uncaughtSignal && ended.status == SIGTERM, "\(ended.stderr)")
            try await holder.execute("COMMIT")
        }
    }

    /// A notification whose work waits on a lock when the stop comes: cancelled, and its start
    /// taken back, since the process did not die on it (three such stops would have quarantined a
    /// refund).
    @Test func aNotificationCancelledByAStopKeepsNoStartTowardItsQuarantine() async throws {
        try await RunWorld.with("cancel-notification") { world in
            let (root, environment) = try await V2Notifications.storedRefund(world)
            let holder = try await world.database.connect()
            try await holder.execute("BEGIN")
            try await holder.execute("LOCK TABLE iap.transactions IN SHARE MODE")
            let cli = try CLIProcess(["backfill", "--notifications-only", "--apple-root-certificate", root.path, "--report-dir", world.reportRoot.path],
                                     environment: environment)
            try await waitUntil("the notification's work waits on the lock") { try await Self.lockWaits(world, observer: world.connection) > 0 }
            #expect(try await world.count("SELECT unfinished_starts FROM iap.notifications") == 1, "its start was counted first")
            cli.signal(SIGTERM)
            let gone = try await Self.lockWaitsGone(world, observer: world.connection)
            #expect(gone < Self.limit, "the notification's statement still waited \(gone) after SIGTERM")
            try await holder.execute("COMMIT")
            let result = try await cli.wait()
            #expect(result.status == 1, "\(result.stderr.suffix(4000))")
            #expect(try await world.connection.query("SELECT status FROM iap.reconciliation_runs")[0].decode("status", as: String.self) == "interrupted")
            #expect(try await world.count("SELECT unfinished_starts FROM iap.notifications WHERE processed_at IS NULL") == 0)
        }
    }
}
