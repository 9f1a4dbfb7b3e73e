import AppStoreModels
import Foundation
import Jobs
import Postgres
import Reconciliation
import Storage
import TestSupport
import Testing
@testable import WorldSupport

/// `--source server-api` end to end: real PostgreSQL, the simulator's Server API signing with its
/// own chain, the same rules, diff and writer as verifyReceipt.
@Suite struct ServerAPISourceTests {
    static func options(_ world: RunWorld) -> RunOptions {
        // A backfill: the tests run verifyReceipt first, after which nothing is due.
        var options = world.options(kind: .backfill, selection: .backfill(accounts: [], receiptIds: [], since: nil, until: nil, products: [], all: true))
        options.sources = .serverAPI
        options.bundleIds = ["com.example.app"]
        options.appleRootCertificates = [world.simulator.signingRoot]
        return options
    }

    static let day: Int64 = 86_400_000

    /// A real receipt (never verified here) whose local decode names two original transactions.
    static func realReceipt() throws -> String {
        String(decoding: try Fixtures.bytes("receipts/appreceiptvalidator-grandUnifiedExpiredAppleCert_receipt-com.mbaasy.ios.demo.b64"), as: UTF8.self)
    }

    @Test func anAccountNeverVerifiedIsReconciledThroughTheAPIFromItsLocalDecodeAlone() async throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let chains: [String: Any] = [
            "1000000166965150": [
                "environment": "Production", "page_size": 1,
                "transactions": [
                    ["transactionId": "1000000166965150", "productId": "monthly", "type": "Auto-Renewable Subscription",
                     "purchaseDate": now - 40 * Self.day, "expiresDate": now - 10 * Self.day],
                    ["transactionId": "2000000000000777", "productId": "monthly", "type": "Auto-Renewable Subscription",
                     "purchaseDate": now - 10 * Self.day, "expiresDate": now + 20 * Self.day, "price": 4990, "currency": "EUR"],
                ],
                "renewal": ["autoRenewStatus": 1, "autoRenewProductId": "monthly"],
            ],
            "1000000166865231": [
                "environment": "Production",
                "transactions": [["transactionId": "1000000166865231", "productId": "consumable", "type": "Consumable", "purchaseDate": now - 50 * Self.day]],
            ],
        ]
        try await RunWorld.with("api-migrant", scenario: ["api": ["chains": chains]]) { world in
            try await world.addReceipt("migrant", Self.realReceipt())
            let (summary, ending) = try await world.run(Self.options(world))
            #expect(ending == .completed)
            #expect(summary.receipts[.verified] == 1)
            let monthly = try #require(try await world.entitlements()["migrant/monthly"])
            #expect(monthly.state == .active)
            #expect(monthly.latestTransactionId == "2000000000000777")
            #expect(monthly.expiresAt == Date(ms: now + 20 * Self.day))
            #expect(monthly.autoRenew == true)
            // Every transaction of both chains is in the ledger, written by the API, with its price.
            let ledger = try await world.connection.query("""
                SELECT transaction_id, source, price_milliunits, currency FROM iap.transactions WHERE account_id = 'migrant' ORDER BY transaction_id
                """)
            #expect(try ledger.map { try $0.decode("transaction_id", as: String.self) } == ["1000000166865231", "1000000166965150", "2000000000000777"])
            #expect(try ledger.allSatisfy { try $0.decode("source", as: String?.self) == "server_api" })
            #expect(try ledger[2].decode("price_milliunits", as: Int64?.self) == 4990)
            // Two chains of two customers: history for each (2 pages + 1), statuses only for the subscription's.
            #expect(summary.appleRequests == 4)
        }
    }

    @Test func aRefundOnlyTheAPIKnowsIsApplied() async throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let chains: [String: Any] = [
            "80": [
                "environment": "Production",
                "transactions": [["transactionId": "80", "productId": "pro.monthly", "type": "Auto-Renewable Subscription",
                                  "purchaseDate": now - 20 * Self.day, "expiresDate": now + 10 * Self.day,
                                  "revocationDate": now - 3_600_000, "revocationReason": 1]],
                "renewal": ["autoRenewStatus": 0, "autoRenewProductId": "pro.monthly"],
            ],
        ]
        try await RunWorld.with("api-refund", scenario: ["api": ["chains": chains]]) { world in
            try await world.addReceipt("payer", spec: ["generate": ["subscriptions": [world.subscription(original: "80", renewals: 1, endDays: 10)]]])
            var verifyReceipt = world.options()
            verifyReceipt.bundleIds = ["com.example.app"]
            _ = try await world.run(verifyReceipt)
            #expect(try await world.entitlements()["payer/pro.monthly"]?.state == .active)
            let (summary, _) = try await world.run(Self.options(world))
            #expect(summary.corrections["revoke"] == 1)
            let refunded = try #require(try await world.entitlements()["payer/pro.monthly"])
            #expect(refunded.state == .refunded)
            #expect(refunded.refundedAt == Date(ms: now - 3_600_000))
        }
    }

    @Test func aRefusedKeyStopsTheRunAndAppliesNothing() async throws {
        try await RunWorld.with("api-401", scenario: ["api": ["unauthorized": true, "chains": [:] as [String: Any]]]) { world in
            try await world.addReceipt("payer", spec: ["generate": ["subscriptions": [world.subscription(original: "81", endDays: 10)]]])
            _ = try await world.run(world.options())
            let before = try await world.entitlements()
            let (summary, ending) = try await world.run(Self.options(world))
            #expect(ending == .sharedSecretRejected)
            #expect(summary.status == .failed)
            #expect(summary.error?.contains("APPSTORE_KEY_ID") == true)
            #expect(try await world.entitlements() == before)
        }
    }

    /// An account that holds only a consumable has no entitlement to name its transaction: the
    /// ledger's ids, kept with its receipt at its last verification, are where the API is asked.
    @Test func theLedgersIdsAreAskedEvenWithoutAnEntitlement() async throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let chains: [String: Any] = [
            "95": ["environment": "Production", "transactions": [[
                "transactionId": "95", "productId": "coins.100", "type": "Consumable", "purchaseDate": now - 2 * Self.day,
                "revocationDate": now - Self.day, "revocationReason": 1, "price": 990, "currency": "EUR",
            ]]],
        ]
        try await RunWorld.with("api-ledger-ids", scenario: ["api": ["chains": chains]]) { world in
            try await world.connection.execute("INSERT INTO iap.products (product_id, type) VALUES ('coins.100', 'consumable')")
            try await world.addReceipt("gamer", spec: ["generate": ["purchases": [["product_id": "coins.100", "transaction_id": "95"]]]])
            _ = try await world.run(world.options())
            #expect(try await world.entitlements().isEmpty)
            let (summary, _) = try await world.run(Self.options(world))
            #expect(summary.receipts[.verified] == 1, "\(summary.receipts)")
            let row = try await world.connection.query("SELECT cancellation_date, source, price_milliunits FROM iap.transactions WHERE transaction_id = '95'")[0]
            #expect(try row.decode("cancellation_date", as: Date?.self) == Date(ms: now - Self.day))
            #expect(try row.decode("source", as: String?.self) == "server_api")
            #expect(try row.decode("price_milliunits", as: Int64?.self) == 990)
        }
    }

    // MARK: --source both

    /// Three accounts verifyReceipt sees alike; the simulator's API is told to disagree on two:
    /// a refund only it knows, and a later expiry.
    static func disagreeingWorld(_ body: @escaping (RunWorld) async throws -> Void) async throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        func chain(_ id: String, expires: Int64, refunded: Int64? = nil) -> [String: Any] {
            var transaction: [String: Any] = ["transactionId": id, "productId": "pro.monthly", "type": "Auto-Renewable Subscription",
                                              "purchaseDate": now + 10 * day - 30 * day, "expiresDate": expires]
            if let refunded { transaction["revocationDate"] = refunded; transaction["revocationReason"] = 0 }
            return ["environment": "Production", "transactions": [transaction], "renewal": ["autoRenewStatus": 1, "autoRenewProductId": "pro.monthly"]]
        }
        let chains: [String: Any] = [
            "80": chain("80", expires: now + 10 * day, refunded: now - 3_600_000),
            "81": chain("81", expires: now + 15 * day),
            "82": chain("82", expires: now + 10 * day),
        ]
        try await RunWorld.with("api-both", now: Date(ms: now), scenario: ["api": ["chains": chains]]) { world in
            for (account, original) in [("refunded", "80"), ("longer", "81"), ("same", "82"), ("unknown", "83")] {
                try await world.addReceipt(account, spec: ["generate": ["subscriptions": [world.subscription(original: original, renewals: 1, endDays: 10)]]])
            }
            var verifyReceipt = world.options()
            verifyReceipt.bundleIds = ["com.example.app"]
            _ = try await world.run(verifyReceipt)
            try await body(world)
        }
    }

    static func both(_ world: RunWorld, authority: AppleSource) -> RunOptions {
        var options = Self.options(world)
        options.sources = .both(authority: authority)
        return options
    }

    @Test func bothReportsExactlyTheDisagreementsAndAppliesVerifyReceiptsAnswer() async throws {
        try await Self.disagreeingWorld { world in
            let (summary, ending) = try await world.run(Self.both(world, authority: .verifyReceipt))
            #expect(ending == .completed)
            #expect(summary.disagreements == [.refundOnlyInServerAPI: 1, .state: 1, .expiry: 1])
            let csv = try String(contentsOf: try #require(try world.lastReportDirectory()).appending(path: "disagreements.csv"), encoding: .utf8)
            let rows = csv.components(separatedBy: "\r\n").filter { !$0.isEmpty }
            #expect(rows.first == "account_id,kind,product_id,transaction_id,verify_receipt,server_api")
            #expect(Set(rows.dropFirst().map { $0.split(separator: ",").prefix(2).joined(separator: ",") })
                == ["refunded,refund_only_in_server_api", "refunded,state_differs", "longer,expiry_differs"])
            #expect(rows.contains("refunded,state_differs,pro.monthly,,active,refunded"))
            // verifyReceipt is the authority: nothing of the API's refund is applied.
            #expect(try await world.entitlements()["refunded/pro.monthly"]?.state == .active)
            #expect(summary.totalCorrections == 0)
            // The API knows nothing of the fourth account: verified by verifyReceipt all the same, not compared.
            #expect(summary.accountsNotCrossChecked == 1)
            #expect(summary.accountsVerified == 4)
            let markdown = try String(contentsOf: try #require(try world.lastReportDirectory()).appending(path: "summary.md"), encoding: .utf8)
            #expect(markdown.contains("## Where verifyReceipt and the App Store Server API disagree"))
            #expect(markdown.contains("| refund_only_in_server_api | 1 |"))
            // Both sources were asked for every account: 4 verifyReceipt requests, 2 API calls for each
            // known account, and the unknown one's history asked of production, then sandbox.
            #expect(summary.appleRequests == 4 + 3 * 2 + 2)
        }
    }

    @Test func bothWithTheServerAPIAsAuthorityAppliesItsAnswer() async throws {
        try await Self.disagreeingWorld { world in
            let (summary, _) = try await world.run(Self.both(world, authority: .serverAPI))
            #expect(summary.disagreements?[.refundOnlyInServerAPI] == 1)
            let entitlements = try await world.entitlements()
            #expect(entitlements["refunded/pro.monthly"]?.state == .refunded)
            #expect(entitlements["longer/pro.monthly"]?.expiresAt == world.expiry(endDays: 15))
            #expect(entitlements["same/pro.monthly"]?.state == .active)
            // The authority failed for the unknown account: it is not corrected from the other source.
            #expect(summary.accountsFailed == 1 && summary.accountsNotCrossChecked == nil)
        }
    }
}
