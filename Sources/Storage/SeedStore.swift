import Foundation
import Postgres
import Reconciliation

/// Loads a sample world (the demo's, the benchmark's) into an empty database with COPY: the
/// catalog, the receipts an app server would have stored, its entitlement rows, notifications.
public struct SeedStore: Sendable {
    /// Storage's alone: every statement and transaction on it is written here, never by a caller.
    let connection: PostgresConnection

    public init(connection: PostgresConnection) {
        self.connection = connection
    }

    /// Ends the session; later calls fail with `connectionClosed`.
    public func close() async {
        await connection.close()
    }

    /// A row of `iap.app_receipts` as an app server inserts it.
    public struct Receipt: Sendable {
        public var accountId: String
        public var bundleId: String?
        public var latestReceipt: String

        public init(accountId: String, bundleId: String?, latestReceipt: String) {
            self.accountId = accountId
            self.bundleId = bundleId
            self.latestReceipt = latestReceipt
        }
    }

    /// Loads a whole world in one transaction: an empty database gets all of it or, when anything
    /// fails, none of it, so a second try starts from empty again.
    public func load<Result: Sendable>(_ body: (SeedStore) async throws -> Result) async throws -> Result {
        try await connection.withTransaction { _ in try await body(self) }
    }

    public func hasReceipts() async throws -> Bool {
        try await connection.query("SELECT EXISTS (SELECT 1 FROM iap.app_receipts) AS any")[0].decode("any")
    }

    public func copy(catalog: [Product]) async throws {
        try await connection.copy(into: "iap.products", columns: ["product_id", "type", "duration", "entitlement", "price", "currency"],
                                  rows: catalog.map { product in
            [PostgresBind(product.productId), PostgresBind(product.type.rawValue),
             product.duration.map {
                 PostgresBind(PostgresInterval(months: Int32($0.months), days: Int32($0.days), microseconds: Int64($0.seconds * 1_000_000)))
             } ?? .null,
             product.entitlement.map { PostgresBind($0) } ?? .null,
             product.price.map { PostgresBind($0) } ?? .null,
             product.currency.map { PostgresBind($0) } ?? .null]
        })
    }

    public func copy(receipts: [Receipt]) async throws {
        try await connection.copy(into: "iap.app_receipts", columns: ["account_id", "bundle_id", "latest_receipt"], rows: receipts.map {
            [PostgresBind($0.accountId), $0.bundleId.map { PostgresBind($0) } ?? .null, PostgresBind($0.latestReceipt)]
        })
    }

    /// Entitlement rows as the app server stored them, last written at `updatedAt`.
    public func copy(entitlements: [Entitlement], updatedAt: Date) async throws {
        let columns = ["account_id", "product_id", "original_transaction_id", "latest_transaction_id", "state", "entitled", "expires_at",
                       "auto_renew", "auto_renew_product_id", "environment", "ownership_type", "updated_at"]
        try await connection.copy(into: "iap.entitlements", columns: columns, rows: entitlements.map { row in
            func optional(_ value: (some PostgresEncodable)?) -> PostgresBind { value.map { PostgresBind($0) } ?? .null }
            return [PostgresBind(row.accountId), PostgresBind(row.productId), PostgresBind(row.originalTransactionId),
                    optional(row.latestTransactionId), PostgresBind(row.state.rawValue), PostgresBind(row.entitled),
                    optional(row.expiresAt), optional(row.autoRenew), optional(row.autoRenewProductId), optional(row.environment),
                    optional(row.ownershipType), PostgresBind(updatedAt)]
        })
    }

    /// Records that the app's access was imported (`iap.adoption`), as docs/adoption.md's import does.
    public func recordAccessImported() async throws {
        try await connection.execute("""
            INSERT INTO iap.adoption (access_imported_at) VALUES (now())
            ON CONFLICT (id) DO UPDATE SET access_imported_at = COALESCE(iap.adoption.access_imported_at, now())
            """)
    }

    /// Server notification bodies, as the app server stores them.
    public func copy(notifications bodies: [String]) async throws {
        try await connection.copy(into: "iap.notifications", columns: ["body"], rows: bodies.map { [PostgresBind(PostgresJSON(text: $0))] })
    }
}
