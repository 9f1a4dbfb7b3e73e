import CivilCalendar
import Foundation
import Jobs
import Postgres
import Reconciliation
import TestSupport
import Testing
@testable import WorldSupport

/// A run that asks the Server API, killed mid-way twice and rerun, loses and doubles nothing:
/// it ends with exactly the corrections of an undisturbed run, as for verifyReceipt.
@Suite struct ServerAPIKillTests {
    static let accounts = 240

    /// The receipts of both worlds, made before the worlds so the simulator's API can know them.
    static func blobs(now: Date) -> [String] {
        let nowMs = Int64(now.timeIntervalSince1970 * 1000), day: Int64 = 86_400_000
        return (0..<accounts).map { index in
            let renewals = 1 + index % 5
            let end = nowMs + Int64(index % 20 - 5) * day
            return syntheticReceipt(["generate": ["subscriptions": [[
                "product_id": "pro.monthly", "original_transaction_id": "\(10_000 + index)", "renewals": renewals,
                "start_ms": end - Int64(renewals) * 30 * day, "period_ms": 30 * day,
            ]]]])
        }
    }

    @Test func killedTwiceAndRerunEndsWithTheCorrectionsOfAnUndisturbedRun() async throws {
        let now = Date()
        let blobs = Self.blobs(now: now)
        let api: [String: Any] = ["from_receipts": blobs]
        let key = FileManager.default.temporaryDirectory.appending(path: "rr-key-\(UUID().uuidString).p8")
        try Fixtures.privateKey(at: key)
        defer { try? FileManager.default.removeItem(at: key) }
        try await RunWorld.with("api-kill", now: now, scenario: ["api": api]) { killed in
            try await RunWorld.with("api-calm", now: now, scenario: ["api": api]) { calm in
                try await APIWorld.store(blobs, in: killed)
                try await APIWorld.store(blobs, in: calm)
                let root = killed.reportRoot.appending(path: "root.der")
                try FileManager.default.createDirectory(at: killed.reportRoot, withIntermediateDirectories: true)
                try Data(killed.simulator.signingRoot).write(to: root)
                let environment = APIWorld.environment(killed, key: key)
                // The notification history from an hour back: one request an environment, not a first
                // read's thirty day-slices, which would eat the requests the hold lets through.
                let since = Timestamp.format(now.addingTimeInterval(-3600))
                let arguments = [
                    "run", "--source", "both", "--authority", "server-api", "--apple-root-certificate", root.path,
                    "--concurrency", "4", "--batch-size", "7", "--report-dir", killed.reportRoot.path, "--notification-history-since", since,
                    "--max-revoke-ratio", "1",  // nothing stored: each lapsed account is a revoke; the limit is not this test's subject
                ]
                // Each account asks Apple about three times (verifyReceipt, the history, the
                // statuses), and the Server API is never held: 120 requests let some 40 accounts
                // through, and the run then waits on verifyReceipt until it is killed.
                for round in 1...2 {
                    try await RunWorld.killOnceCommitted(arguments, environment: environment, world: killed, run: round, passing: 120)
                }
                try await killed.simulator.release()
                let rerun = try await CLIProcess.run(arguments, environment: environment)
                #expect(rerun.status == 0, "\(rerun.stderr)")
                let runs = try await killed.connection.query("SELECT id, status, accounts_processed, COALESCE(error, '') AS error FROM iap.reconciliation_runs ORDER BY id")
                    .map { "\(try $0.decode("id", as: Int.self)) \(try $0.decode("status", as: String.self)) \(try $0.decode("accounts_processed", as: Int.self)) \(try $0.decode("error", as: String.self))" }
                #expect(runs.prefix(2).allSatisfy { $0.contains(" interrupted ") } && runs.count == 3, "\(runs)")

                var options = calm.options()
                options.sources = .both(authority: .serverAPI)
                options.bundleIds = ["com.example.app"]
                options.appleRootCertificates = [calm.simulator.signingRoot]
                options.maximumRevokeRatio = 1  // as the killed runs
                let (undisturbed, _) = try await calm.run(options)
                #expect(undisturbed.accountsProcessed == Self.accounts)
                #expect(undisturbed.disagreements == nil)  // the same world through both doors
                let expected = try await RunWorld.appliedCorrections(calm)
                #expect(expected.count > Self.accounts / 2)
                #expect(try await RunWorld.appliedCorrections(killed) == expected)
                #expect(try await killed.entitlements() == calm.entitlements())
                // The ledger rows came from the API in both worlds, once each.
                #expect(try await killed.count("SELECT count(*) FROM iap.transactions WHERE source = 'server_api'")
                    == calm.count("SELECT count(*) FROM iap.transactions WHERE source = 'server_api'"))
                #expect(try await killed.count("SELECT count(*) FROM iap.app_receipts WHERE last_verified_at IS NULL") == 0)
            }
        }
    }
}

/// HTTP 401 from the Server API is a key set-up that is wrong: the command exits 2, as for 21004,
/// and names what to check, never the key.
@Suite struct ServerAPIUnauthorizedCLITests {
    @Test func a401ExitsWithStatus2() async throws {
        let key = FileManager.default.temporaryDirectory.appending(path: "rr-key-\(UUID().uuidString).p8")
        let pem = try Fixtures.data("asapi/apple-lib/swift/certs/testSigningKey.p8")
        try Fixtures.privateKey(at: key)
        defer { try? FileManager.default.removeItem(at: key) }
        try await RunWorld.with("api-401-cli", scenario: ["api": ["unauthorized": true]]) { world in
            try await RunWorld.populate(world, count: 5)
            _ = try await world.run(world.options())  // entitlements, so the API has ids to ask about
            let environment = APIWorld.environment(world, key: key)
            let result = try await CLIProcess.run(
                ["backfill", "--all", "--source", "server-api", "--report-dir", world.reportRoot.path], environment: environment)
            #expect(result.status == 2)
            #expect(result.stderr.contains("APPSTORE_KEY_ID") || result.stdout.contains("APPSTORE_KEY_ID"))
            let keyLine = String(decoding: pem, as: UTF8.self).split(separator: "\n")[1]
            #expect(!result.stderr.contains(keyLine) && !result.stdout.contains(keyLine))
        }
    }
}
