import AppStore
import AppStoreModels
import AppleSimulator
import Foundation
import HTTP
import Jobs
import Logging
import Postgres
import Reconciliation
import SchemaMigrations
import Storage
import Testing
import TestSupport

/// Server Notifications V2 signed by a test chain the world trusts, and how they are ingested.
enum V2Notifications {
    static let chain = try! SigningChain.create()

    static let appAppleId: Int64 = 1234

    static func options(_ world: RunWorld) -> RunOptions {
        var options = world.options()
        options.appleRootCertificates = [chain.root]
        options.bundleIds = ["com.example.app"]
        options.appAppleId = appAppleId
        return options
    }

    /// A V2 body: `transaction` is signed inside it as signedTransactionInfo.
    static func body(
        _ type: String, subtype: String? = nil, uuid: String = UUID().uuidString.lowercased(), transaction: [String: Any]? = nil,
        bundleId: String = "com.example.app", environment: String = "Production", fault: SigningChain.Fault? = nil,
        undated: Bool = false, signedDate: Any? = nil
    ) throws -> String {
        var data: [String: Any] = ["bundleId": bundleId, "environment": environment, "appAppleId": appAppleId]
        if let transaction { data["transactionInfo"] = transaction }
        var spec: [String: Any] = ["notificationType": type, "notificationUUID": uuid, "data": data]
        if let subtype { spec["subtype"] = subtype }
        if let fault { spec["simulatorFault"] = fault.rawValue }
        if undated { spec["signedDate"] = NSNull() }  // signed with no signedDate, on the payload nor on its transaction
        if let signedDate { spec["signedDate"] = signedDate }
        return try SignedNotifications(chain: chain).body(forSpec: Array(JSONSerialization.data(withJSONObject: spec)))
    }

    static func consumable(_ id: String, world: RunWorld, revokedAt: Int64? = nil) -> [String: Any] {
        var transaction: [String: Any] = [
            "transactionId": id, "originalTransactionId": id, "productId": "coins.100", "type": "Consumable", "quantity": 1,
            "purchaseDate": world.nowMs - 3 * world.dayMs, "originalPurchaseDate": world.nowMs - 3 * world.dayMs,
            "inAppOwnershipType": "PURCHASED", "price": 990, "currency": "EUR",
        ]
        if let revokedAt {
            transaction["revocationDate"] = revokedAt
            transaction["revocationReason"] = 1
        }
        return transaction
    }

    /// The world of the v1 refund test: a finished consumable in the ledger only.
    static func gamer(_ world: RunWorld, cancelled: Bool = false) async throws {
        try await world.addReceipt("gamer", spec: ["generate": ["purchases": [["product_id": "lifetime", "transaction_id": "90"]]]])
        try await world.connection.execute("""
            INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, quantity,
                                          environment, cancellation_date, cancellation_reason)
            VALUES ('91', 'gamer', '91', 'coins.100', now() - interval '3 days', 1, 'Production',
                    CASE WHEN \(cancelled) THEN now() - interval '1 day' END, CASE WHEN \(cancelled) THEN 1 END)
            """)
    }

    /// What the simulated Send Consumption Information received, in order (`GET /__consumption`).
    static func consumptionReceived(_ world: RunWorld) async throws -> [(transaction: String, body: String, status: Int)] {
        let client = HTTPClient()
        defer { client.shutdown() }
        let response = try await client.execute(HTTPRequest(url: "http://127.0.0.1:\(world.simulator.port)/__consumption", method: "GET"))
        let entries = try JSONSerialization.jsonObject(with: Data(response.body)) as? [[String: Any]] ?? []
        return entries.map { ($0["transaction_id"] as? String ?? "", $0["body"] as? String ?? "", $0["status"] as? Int ?? 0) }
    }

    static func ingest(_ world: RunWorld, _ bodies: [String]) async throws -> Int {
        try await NotificationStore(connection: world.connection).insert(bodies: bodies)
    }

    /// The gamer's signed REFUND of consumable 91 stored, the test chain's root written for the
    /// executable, and its environment (the bundle id and this app's Apple id set).
    static func storedRefund(_ world: RunWorld) async throws -> (root: URL, environment: [String: String]) {
        try await gamer(world)
        let refund = try body("REFUND", transaction: consumable("91", world: world, revokedAt: world.nowMs - 3_600_000))
        #expect(try await ingest(world, [refund]) == 1)
        try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
        let root = world.reportRoot.appending(path: "root.der")
        try Data(chain.root).write(to: root)
        var environment = RunWorld.environment(world)
        environment["APPSTORE_BUNDLE_ID"] = "com.example.app"
        environment["APPSTORE_APP_APPLE_ID"] = String(appAppleId)
        return (root, environment)
    }
}
