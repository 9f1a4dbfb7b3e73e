import AppStore
import AppStoreModels
import AppleSimulator
import Foundation
import Jobs
import Logging
import Postgres
import Reconciliation
import SchemaMigrations
import Storage
import Testing
import TestSupport

/// The executable's world: its environment, accounts in bulk, a run killed once it committed.
extension RunWorld {
    static func environment(_ world: RunWorld, secret: String? = nil) -> [String: String] {
        [
            "DATABASE_URL": world.database.connectionString,
            "APPLE_SHARED_SECRET": secret ?? world.secret,
            "APPLE_PRODUCTION_URL": world.simulator.productionURL,
            "APPLE_SANDBOX_URL": world.simulator.sandboxURL,
        ]
    }

    /// `count` accounts whose answers each give a known correction, applied by the run: a quarter
    /// of them lapsed days ago, none within the expiry lag (whose revoke would wait for a later
    /// run: the one that would end now ends in twelve hours).
    static func populate(_ world: RunWorld, count: Int, latencyFault: Int? = nil) async throws {
        var receipts: [[PostgresBind]] = []
        for index in 0..<count {
            let endDays = index % 20 == 5 ? 0.5 : Double(index % 20) - 5
            var spec: [String: Any] = ["generate": ["subscriptions": [
                world.subscription(original: "\(10_000 + index)", renewals: 1 + index % 5, endDays: endDays),
            ]]]
            if let latencyFault { spec["faults"] = [["delay_ms": latencyFault]]; spec["repeat_faults"] = true }
            receipts.append([PostgresBind(String(format: "acct-%05d", index)), PostgresBind(syntheticReceipt(spec))])
        }
        try await world.connection.copy(into: "iap.app_receipts", columns: ["account_id", "latest_receipt"], rows: receipts)
    }

    /// Starts `arguments` and SIGKILLs it once its run (`run`, the run's id) has committed 20
    /// accounts of its own. The simulator answers `passing` more verifyReceipt requests and holds
    /// every later one until the next run's hold is armed: however fast or slow the machine, the
    /// run cannot end before its kill, and its held requests never reach the next run.
    static func killOnceCommitted(
        _ arguments: [String], environment: [String: String], world: RunWorld, run: Int, passing: Int = 40
    ) async throws {
        try await world.simulator.hold(after: passing)
        let cli = try CLIProcess(arguments, environment: environment)
        try await waitUntil("run \(run) committed 20 accounts") {
            try await world.count("""
                SELECT COALESCE((SELECT accounts_processed FROM iap.reconciliation_runs WHERE id = \(run)), 0)
                """) >= 20
        }
        cli.signal(SIGKILL)
        let ended = try await cli.wait()
        // The kill must be what ended it: a run that had already stopped would prove nothing.
        #expect(cli.process.terminationReason == .uncaughtSignal && ended.status == SIGKILL,
                "run \(run) ended by itself (status \(ended.status)) before the kill: \(ended.stderr.suffix(3000))")
    }

    /// (account, product, kind, after) of every applied correction: what a run did, whoever ran it.
    static func appliedCorrections(_ world: RunWorld) async throws -> [String] {
        try await world.connection.query("""
            SELECT account_id || '/' || product_id || '/' || kind || '/' || (after->>'state') || '/' || COALESCE(after->>'expires_at', '') AS c
            FROM iap.corrections WHERE status = 'applied' ORDER BY 1
            """).map { try $0.decode("c") }
    }
}
