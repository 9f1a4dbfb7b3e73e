import Foundation
import Postgres
import Reconciliation
@testable import Storage
import TestSupport
import Testing

/// A correction's before/after JSON, written by hand: it reads back as the same entitlement, in
/// Swift and in PostgreSQL, whatever its strings hold.
@Suite struct EntitlementJSONTests {
    static let hostile = Entitlement(
        accountId: "quote \" backslash \\ slash / tab \t newline \n bell \u{07} naïve 🧾", productId: "pro.monthly",
        originalTransactionId: "1000000000000001", latestTransactionId: nil, state: .active,
        expiresAt: Date(timeIntervalSince1970: 1_795_311_720.123456), gracePeriodExpiresAt: nil, autoRenew: false,
        autoRenewProductId: "{a,b}", environment: "Production", ownershipType: nil,
        refundedAt: Date(timeIntervalSince1970: -0.5))

    @Test func roundTripsThroughItsDecoder() throws {
        let text = try #require(try EntitlementJSON.encode(Self.hostile))
        #expect(try EntitlementJSON.decode(text) == Self.hostile)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(object.keys.sorted() == [
            "account_id", "auto_renew", "auto_renew_product_id", "entitled", "environment", "expires_at",
            "grace_period_expires_at", "latest_transaction_id", "original_transaction_id", "ownership_type", "product_id",
            "refunded_at", "state",
        ])
        #expect(object["entitled"] as? Bool == true)
        #expect(object["latest_transaction_id"] is NSNull)
        #expect(try EntitlementJSON.encode(nil) == nil)
    }

    @Test func postgresReadsItAsTheRow() async throws {
        let database = try await TestDatabase.create("entjson")
        let connection = try await database.connect()
        let text = try #require(try EntitlementJSON.encode(Self.hostile))
        let rows = try await connection.query("""
            SELECT j->>'account_id' AS account, (j->>'expires_at')::timestamptz AS expires, (j->>'entitled')::boolean AS entitled
            FROM (SELECT \(text)::jsonb AS j) AS s
            """)
        #expect(try rows[0].decode("account", as: String.self) == Self.hostile.accountId)
        #expect(try rows[0].decode("expires", as: Date.self) == Self.hostile.expiresAt)
        #expect(try rows[0].decode("entitled", as: Bool.self))
        await connection.close()
        try await database.drop()
    }
}
