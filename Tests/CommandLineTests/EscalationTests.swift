import Foundation
import Postgres
import Reconciliation
import Testing
import TestSupport
@testable import WorldSupport

/// A receipt that keeps failing (docs/apple.md, "A receipt that keeps failing"), through the
/// executable: at `--escalate-after` runs in a row its account is reported on its own line with
/// Apple's last status, in the summary, the report and the gauge; one Apple keeps calling malformed
/// (21002) is set aside for 30 days, until its blob is replaced; one whose Apple account is gone
/// (21010) keeps its entitlement.
@Suite struct EscalationTests {
    @Test func aReceiptFailingRunAfterRunIsReportedAndAMalformedOneSetAside() async throws {
        try await RunWorld.with("escalation") { world in
            try await world.addReceipt("malformed", spec: ["faults": [["status": 21002]], "repeat_faults": true])
            try await world.addReceipt("gone", spec: ["faults": [["status": 21010]], "repeat_faults": true])
            try await world.store(Entitlement(accountId: "gone", productId: "pro.monthly", originalTransactionId: "77", state: .active,
                                              expiresAt: world.expiry(endDays: 20)))
            try await world.addReceipt("payer", spec: ["generate": ["subscriptions": [world.subscription(original: "78", endDays: 20)]]])
            try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
            var last: (status: Int32, stdout: String, stderr: String)?
            for night in 1...3 {
                let metrics = world.reportRoot.appending(path: "night-\(night).prom")
                let result = try await CLIProcess.run(
                    ["backfill", "--all", "--escalate-after", "3", "--max-attempts", "1", "--metrics-file", metrics.path,
                     "--report-dir", world.reportRoot.appending(path: "night-\(night)").path],
                    environment: RunWorld.environment(world))
                #expect(result.status == 0 || result.status == 1, "night \(night): \(result.stderr.suffix(800))")
                let gauge = try String(contentsOf: metrics, encoding: .utf8)
                let failing = night < 3 ? 0 : 2
                #expect(gauge.contains("receipt_reconciler_last_run_failing_receipts{kind=\"backfill\"} \(failing)"), "night \(night): \(gauge)")
                #expect(result.stdout.contains("failing run after run") == (night == 3), "night \(night): \(result.stdout)")
                last = result
            }
            let third = try #require(last)
            #expect(third.stdout.contains("account gone (receipt 2): 3 runs in a row, failed, Apple's last status 21010"), "\(third.stdout)")
            #expect(third.stdout.contains("account malformed (receipt 1): 3 runs in a row, failed, Apple's last status 21002: set aside for 30 days"),
                    "\(third.stdout)")
            let report = try String(contentsOf: world.reportRoot.appending(path: "night-3/summary.md"), encoding: .utf8)
            #expect(report.contains("## Receipts failing run after run"))
            // Set aside: not due for 30 days; the one whose Apple account is gone is asked again after 20 hours.
            let malformed = try await world.connection.query("""
                SELECT last_outcome, next_attempt_at > now() + interval '29 days' AS aside FROM iap.app_receipts WHERE account_id = 'malformed'
                """)[0]
            #expect(try malformed.decode("last_outcome", as: String?.self) == "failed" && malformed.decode("aside", as: Bool.self))
            let gone = try await world.connection.query("""
                SELECT next_attempt_at < now() + interval '21 hours' AS soon FROM iap.app_receipts WHERE account_id = 'gone'
                """)[0]
            #expect(try gone.decode("soon", as: Bool.self))
            #expect(try await world.count("SELECT malformed_runs FROM iap.app_receipts WHERE account_id = 'malformed'") == 3)
            #expect(try await world.count("SELECT malformed_runs FROM iap.app_receipts WHERE account_id = 'gone'") == 0, "21010 is no malformed blob")
            // The app server stores a new blob (a restore): set aside no more, due at once, its count started over.
            let restored = syntheticReceipt(["generate": ["subscriptions": [world.subscription(original: "79", endDays: 20)]]])
            try await world.connection.execute("UPDATE iap.app_receipts SET latest_receipt = \(restored) WHERE account_id = 'malformed'")
            let replaced = try await world.connection.query("""
                SELECT next_attempt_at IS NULL AS due, malformed_runs FROM iap.app_receipts WHERE account_id = 'malformed'
                """)[0]
            #expect(try replaced.decode("due", as: Bool.self) && replaced.decode("malformed_runs", as: Int.self) == 0)
            // Nothing granted or revoked on a failure: the entitlement is as it was; the payer was verified every night.
            #expect(try await world.entitlements()["gone/pro.monthly"]?.state == .active)
            #expect(try await world.count("SELECT attempts FROM iap.app_receipts WHERE account_id = 'payer'") == 0)
        }
    }
}
