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

/// Server notifications (v1) as an app server stores them.
enum V1Notifications {
    static func notification(_ type: String, password: String, original: String, transactions: [[String: Any]] = [],
                             environment: String = "PROD") -> String {
        let body: [String: Any] = [
            "notification_type": type, "password": password, "environment": environment, "original_transaction_id": original,
            "unified_receipt": ["status": 0, "environment": "Production", "latest_receipt": "ZmFrZQ==",
                                "latest_receipt_info": transactions, "pending_renewal_info": []],
        ]
        return String(decoding: try! JSONSerialization.data(withJSONObject: body, options: [.sortedKeys]), as: UTF8.self)
    }

    static func store(_ world: RunWorld, _ bodies: [String], receivedAt: String = "now()") async throws {
        for body in bodies {
            try await world.connection.execute(PostgresQuery(
                unsafeSQL: "INSERT INTO iap.notifications (body, received_at) VALUES ($1::jsonb, \(receivedAt))",
                binds: [PostgresBind(body)]))
        }
    }
}
