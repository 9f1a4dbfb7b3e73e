import Foundation
import Postgres
import Testing
import TestSupport

/// The whole demo world through both doors, as cron runs it: `--source server-api` reaches the
/// same entitlements as `--source verify-receipt`.
@Suite struct SourceParityTests {
    @Test func theServerAPIReachesVerifyReceiptsEntitlementsOverTheDemoWorld() async throws {
        let database = try await TestDatabase.create("parity")
        let connection = try await database.connect()
        defer { Task { await connection.close(); try? await database.drop() } }
        let directory = FileManager.default.temporaryDirectory.appending(path: "rr-parity-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let base = ["DATABASE_URL": database.connectionString, "APPLE_SHARED_SECRET": "parity-secret"]
        #expect(try await CLIProcess.run(["migrate"], environment: base).status == 0)
        let scenarioFile = directory.appending(path: "api.json")
        let seeded = try await CLIProcess.run(["seed-demo", "--accounts", "120", "--api-scenario", scenarioFile.path], environment: base)
        #expect(seeded.status == 0, "\(seeded.stderr)")
        // The same world through both doors, without the demo's deliberate disagreements.
        var scenario = try JSONSerialization.jsonObject(with: Data(contentsOf: scenarioFile)) as! [String: Any]
        var api = scenario["api"] as! [String: Any]
        api["disagreements"] = nil
        scenario["api"] = api
        scenario["shared_secret"] = "parity-secret"
        let simulator = try SimulatorProcess(scenario: scenario)
        defer { simulator.stop() }
        let key = directory.appending(path: "AuthKey.p8")
        try Fixtures.privateKey(at: key)
        try Data(simulator.signingRoot).write(to: directory.appending(path: "root.der"))
        var environment = base
        environment["APPLE_PRODUCTION_URL"] = simulator.productionURL
        environment["APPLE_SANDBOX_URL"] = simulator.sandboxURL
        environment["APPSTORE_BUNDLE_ID"] = "com.example.app"
        let apiEnvironment = environment.merging([
            "APPSTORE_ISSUER_ID": "issuer", "APPSTORE_KEY_ID": "KEY", "APPSTORE_PRIVATE_KEY_FILE": key.path,
            "APPSTORE_APP_APPLE_ID": "1234567890", "APPSTORE_API_URL": simulator.apiURL, "APPSTORE_SANDBOX_API_URL": simulator.sandboxAPIURL,
        ]) { $1 }
        let roots = ["--apple-root-certificate", directory.appending(path: "root.der").path]

        let night = try await CLIProcess.run(
            ["run", "--source", "verify-receipt", "--report-dir", directory.appending(path: "r1").path] + roots, environment: environment)
        #expect(night.status == 0, "\(night.stderr)")
        let afterVerifyReceipt = try await Self.entitlements(connection)
        #expect(afterVerifyReceipt.count > 100)

        let apiRun = try await CLIProcess.run(
            ["backfill", "--all", "--source", "server-api", "--report-dir", directory.appending(path: "r2").path] + roots,
            environment: apiEnvironment)
        #expect(apiRun.status == 0, "\(apiRun.stderr)")
        #expect(apiRun.stdout.contains("corrections: none"), "\(apiRun.stdout)\((try? String(contentsOf: directory.appending(path: "r2/corrections.csv"), encoding: .utf8)) ?? "")")
        #expect(try await Self.entitlements(connection) == afterVerifyReceipt)
        // And the API really spoke: its rows in the ledger.
        let apiRows = try await connection.query("SELECT count(*) AS n FROM iap.transactions WHERE source = 'server_api'")
        #expect(try apiRows[0].decode("n", as: Int64.self) > 0)
    }

    /// Each entitlement's decisive columns, by account and product.
    static func entitlements(_ connection: PostgresConnection) async throws -> [String: String] {
        var result: [String: String] = [:]
        for row in try await connection.query("""
            SELECT account_id, product_id, state, expires_at::text AS expires, latest_transaction_id FROM iap.entitlements
            """) {
            let key = try row.decode("account_id", as: String.self) + "/" + row.decode("product_id", as: String.self)
            result[key] = try [row.decode("state", as: String.self), row.decode("expires", as: String?.self) ?? "-",
                               row.decode("latest_transaction_id", as: String?.self) ?? "-"].joined(separator: " ")
        }
        return result
    }
}
