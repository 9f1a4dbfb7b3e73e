import Foundation
import Jobs
import Logging
import Postgres
import Reconciliation
import SchemaMigrations
import TestSupport
import Testing
@testable import WorldSupport

/// The database server restarted in the middle of a run: the run reconnects or fails cleanly,
/// and a rerun converges on what an undisturbed run gives.
@Suite struct DatabaseRestartTests {
    @Test func aServerRestartMidRunConverges() async throws {
        let cluster = try ThrowawayCluster()
        let now = Date()
        try await RunWorld.with("restartcalm", now: now) { calm in
            let admin = try await PostgresConnection.connect(cluster.adminConnectionString)
            try await admin.execute("CREATE DATABASE restarted")
            await admin.close()
            let url = cluster.adminConnectionString.replacingOccurrences(of: "dbname=postgres", with: "dbname=restarted")
            let connection = try await PostgresConnection.connect(url)
            try await Migrator(logger: .quiet).migrate(connection)
            // The same accounts in both worlds; the restarted one answers slowly so the restart lands mid-run.
            try await RunWorld.populate(calm, count: 200)
            let receipts = try await calm.connection.query("SELECT account_id, latest_receipt FROM iap.app_receipts ORDER BY id")
            let slowed: [[PostgresBind]] = try receipts.map { row in
                let blob: String = try row.decode("latest_receipt")
                var spec = try JSONSerialization.jsonObject(with: Data(Data(base64Encoded: blob)!.dropFirst("simulated-receipt:".utf8.count))) as! [String: Any]
                // 150 ms an answer, 2 in flight: about 15 s for the 200, so the restart (which
                // comes once 20 are committed) lands with most of the run still to go, even on a
                // loaded, sanitized machine (at 50 ms and 4 in flight a run once finished first).
                spec["faults"] = [["delay_ms": 150]]
                spec["repeat_faults"] = true
                return [PostgresBind(try row.decode("account_id", as: String.self)), PostgresBind(syntheticReceipt(spec))]
            }
            try await connection.copy(into: "iap.app_receipts", columns: ["account_id", "latest_receipt"], rows: slowed)
            await connection.close()

            var environment = RunWorld.environment(calm)
            environment["DATABASE_URL"] = url
            // Nothing stored: each lapsed account is a revoke the limit counts; the limit is not this test's subject.
            let arguments = ["run", "--concurrency", "2", "--batch-size", "10", "--max-revoke-ratio", "1",
                             "--report-dir", calm.reportRoot.appending(path: "restart").path]
            let cli = try CLIProcess(arguments, environment: environment)
            // Restart once the run has committed batches of its own and is still writing: the
            // proof that the restart cut a run in the middle, not before it began or after it ended.
            let observer = try await PostgresConnection.connect(url)
            func processed() async throws -> Int {
                try await observer.query("""
                    SELECT COALESCE(max(accounts_processed), 0) AS n FROM iap.reconciliation_runs WHERE status = 'running'
                    """)[0].decode("n")
            }
            try await waitUntil("the run committed its first batches") { try await processed() >= 20 }
            let bootedBefore: String = try await observer.query("SELECT pg_postmaster_start_time()::text AS t")[0].decode("t")
            let atRestart = try await processed()
            await observer.close()
            try cluster.restart()
            let first = try await cli.wait()
            #expect((20..<200).contains(atRestart), "the run had processed \(atRestart) of 200 accounts when the server stopped")
            // The run saw its connections cut: it reconnected and finished (exit 0), or stopped
            // cleanly (exit 1) with an error naming the lost connection.
            #expect(first.stderr.contains("connection lost"), "\(first.stderr.suffix(3000))")
            let afterRestart = try await PostgresConnection.connect(url)
            let bootedAfter: String = try await afterRestart.query("SELECT pg_postmaster_start_time()::text AS t")[0].decode("t")
            #expect(bootedAfter != bootedBefore)
            let cut = try await afterRestart.query("SELECT status, accounts_processed FROM iap.reconciliation_runs ORDER BY id")
            switch first.status {
            case 0:
                #expect(first.stderr.contains("database.retrying"))
                #expect(try cut[0].decode("status", as: String.self) == "completed")
                #expect(try cut[0].decode("accounts_processed", as: Int.self) == 200)
            case 1:
                #expect(try cut[0].decode("accounts_processed", as: Int.self) < 200)
            default:
                Issue.record("the cut run exited \(first.status): \(first.stderr.suffix(3000))")
            }
            await afterRestart.close()
            let rerun = try await CLIProcess.run(arguments, environment: environment)
            #expect(rerun.status == 0, "\(rerun.stderr)")

            var calmOptions = calm.options()
            calmOptions.maximumRevokeRatio = 1  // as the restarted run
            let (undisturbed, _) = try await calm.run(calmOptions)
            #expect(undisturbed.accountsProcessed == 200)
            let restarted = try await PostgresConnection.connect(url)
            let applied = try await restarted.query("""
                SELECT account_id || '/' || product_id || '/' || kind || '/' || (after->>'state') || '/' || COALESCE(after->>'expires_at', '') AS c
                FROM iap.corrections WHERE status = 'applied' ORDER BY 1
                """).map { try $0.decode("c", as: String.self) }
            #expect(applied == (try await RunWorld.appliedCorrections(calm)))
            let unverified = try await restarted.query("SELECT count(*) AS n FROM iap.app_receipts WHERE last_verified_at IS NULL")
            #expect(try unverified[0].decode("n", as: Int.self) == 0)
            await restarted.close()
        }
    }
}
