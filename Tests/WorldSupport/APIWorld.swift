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

/// A world that answers through the App Store Server API: its environment, its receipts, its flags.
enum APIWorld {
    /// The CLI's environment for a world whose simulator also serves the Server API.
    static func environment(_ world: RunWorld, key: URL) -> [String: String] {
        RunWorld.environment(world).merging([
            "APPSTORE_ISSUER_ID": "issuer", "APPSTORE_KEY_ID": "KEY", "APPSTORE_PRIVATE_KEY_FILE": key.path,
            "APPSTORE_BUNDLE_ID": "com.example.app", "APPSTORE_APP_APPLE_ID": "1234567890", "APPSTORE_API_URL": world.simulator.apiURL,
            "APPSTORE_SANDBOX_API_URL": world.simulator.sandboxAPIURL,
        ]) { $1 }
    }

    static func store(_ blobs: [String], in world: RunWorld) async throws {
        let rows = blobs.enumerated().map { [PostgresBind(String(format: "acct-%05d", $0.offset)), PostgresBind($0.element)] }
        try await world.connection.copy(into: "iap.app_receipts", columns: ["account_id", "latest_receipt"], rows: rows)
    }

    /// Five subscribers the simulated Server API serves from their receipts (their chains stored
    /// as entitlements, which is where the API is asked from), a key, and the verifyReceipt
    /// variables only: the API's settings are given as flags.
    static func withAPIWorld(_ label: String, disagreements: [String: [String: Any]] = [:], environment: String = "Production",
                             _ body: (RunWorld, _ key: URL) async throws -> Void) async throws {
        let now = Date()
        let blobs = (0..<5).map { index in
            syntheticReceipt(["environment": environment, "generate": ["subscriptions": [[
                "product_id": "pro.monthly", "original_transaction_id": "\(30_000 + index)", "renewals": 1,
                "start_ms": Int64(now.timeIntervalSince1970 * 1000) - 20 * 86_400_000, "period_ms": 30 * 86_400_000]]]])
        }
        try await RunWorld.with(label, scenario: ["api": ["from_receipts": blobs, "disagreements": disagreements] as [String: Any]]) { world in
            try await APIWorld.store(blobs, in: world)
            try await world.connection.execute("""
                INSERT INTO iap.entitlements (account_id, product_id, original_transaction_id, state, entitled, expires_at, updated_at)
                SELECT account_id, 'pro.monthly', (30000 + substr(account_id, 6)::int)::text, 'active', true, now() + interval '10 days', now()
                FROM iap.app_receipts
                """)
            try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
            let key = world.reportRoot.appending(path: "AuthKey.p8")
            try Fixtures.privateKey(at: key)
            try await body(world, key)
        }
    }

    static func apiFlags(_ world: RunWorld, key: URL) -> [String] {
        ["--appstore-issuer-id", "issuer", "--appstore-key-id", "KEY", "--appstore-private-key-file", key.path,
         "--appstore-api-url", world.simulator.apiURL, "--appstore-sandbox-api-url", world.simulator.sandboxAPIURL,
         "--bundle-id", "com.example.app", "--app-apple-id", "1234567890", "--apple-root-certificate", world.simulator.signingDirectory.appending(path: "root.der").path]
    }
}
