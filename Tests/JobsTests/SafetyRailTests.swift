import AppStore
import Foundation
import Jobs
import Postgres
import Reconciliation
import Storage
import Testing
import TestSupport

/// Issue 15's safety rails: no wrong revoke, no wrong grant, no poisoned night. Each test here
/// failed on the code before its fix.
@Suite struct SafetyRailTests {
    /// An active subscriber whose stored row the run must leave alone whenever its receipts do not all count.
    static func payingCustomer(_ world: RunWorld, _ account: String, original: String) async throws {
        try await world.store(Entitlement(accountId: account, productId: "pro.monthly", originalTransactionId: original,
                                          latestTransactionId: original, state: .active, expiresAt: world.expiry(endDays: 20),
                                          autoRenew: true, autoRenewProductId: "pro.monthly", environment: "Production",
                                          ownershipType: "PURCHASED"))
    }

    /// An ordinary account beside the odd ones: a purchase the app server never stored, to be granted.
    static func ordinaryAccount(_ world: RunWorld, _ account: String, original: String) async throws {
        try await world.addReceipt(account, spec: ["generate": ["subscriptions": [world.subscription(original: original, renewals: 1, endDays: 25)]]])
    }

    /// Item 1: status 0 without a `receipt` is a partial answer; it never revokes a paying customer.
    @Test func aPartialAnswerRevokesNothing() async throws {
        try await RunWorld.with("partial-answer") { world in
            try await world.addReceipt("paying", spec: ["response": ["status": 0, "environment": "Production"]])
            try await Self.payingCustomer(world, "paying", original: "10")
            try await Self.ordinaryAccount(world, "ordinary", original: "11")
            let before = try await world.entitlements()

            let (summary, ending) = try await world.run(world.options())
            #expect(ending == .completed)
            #expect(summary.accountsFailed == 1)
            #expect(summary.receipts["failed"] == 1)
            #expect(try await world.corrections(run: summary.runId) == ["ordinary": ["grant"]])
            #expect(try await world.entitlements()["paying/pro.monthly"] == before["paying/pro.monthly"])
            let row = try await world.connection.query("""
                SELECT last_outcome, last_status, last_verified_at IS NULL AS unverified FROM iap.app_receipts WHERE account_id = 'paying'
                """)[0]
            #expect(try row.decode("last_outcome", as: String.self) == "failed")
            #expect(try row.decode("last_status", as: Int?.self) == 0)
            #expect(try row.decode("unverified", as: Bool.self))
        }
    }

    /// Item 2: a receipt of another bundle is `foreign_bundle`, a failure for its whole account,
    /// whether Apple's answer or the local decode names the other bundle.
    @Test func anotherAppsReceiptGrantsNothing() async throws {
        let otherApp = String(decoding: try Fixtures.bytes("receipts/tpinappreceipt-receipt-production.b64"), as: UTF8.self)
            .filter { !$0.isWhitespace }  // decodes locally as org.getpure.pure-iphone
        let scenario: [String: Any] = ["receipts": [otherApp: ["generate": ["purchases": [["product_id": "lifetime", "transaction_id": "42"]]]]]]
        try await RunWorld.with("foreign-bundle", scenario: scenario) { world in
            // Apple's answer names another bundle: the account's other, good receipt grants nothing either.
            try await world.addReceipt("apple-says-other", spec: ["generate": [
                "bundle_id": "com.other.app", "purchases": [["product_id": "lifetime", "transaction_id": "20"]]]])
            try await Self.ordinaryAccount(world, "apple-says-other", original: "21")
            // The local decode names another bundle: not even sent to Apple.
            try await world.addReceipt("decodes-as-other", otherApp)
            try await Self.ordinaryAccount(world, "ordinary", original: "22")

            let (summary, ending) = try await world.run(world.options())
            #expect(ending == .completed)
            #expect(summary.receipts["foreign_bundle"] == 2)
            #expect(summary.accountsFailed == 2)
            #expect(summary.bundleMismatches.count == 2)
            #expect(summary.bundleMismatches.contains { $0.contains("com.other.app") })
            #expect(summary.bundleMismatches.contains { $0.contains("org.getpure.pure-iphone") })
            #expect(try await world.corrections(run: summary.runId) == ["ordinary": ["grant"]])
            #expect(try await world.entitlements().keys.sorted() == ["ordinary/pro.monthly"])
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE last_outcome = 'foreign_bundle'") == 2)
            // One request for the account Apple named as foreign, two for the ordinary ones; none for the local decode's.
            #expect(summary.appleRequests == 3)
            let failures = try String(contentsOf: try #require(try world.lastReportDirectory()).appending(path: "failures.csv"), encoding: .utf8)
            #expect(failures.contains("foreign_bundle"))

            // A configured bundle id wins over the rows' own: the other app's receipts now count.
            var options = world.options(kind: "backfill", selection: .backfill(
                accounts: ["apple-says-other"], receiptIds: [], since: nil, until: nil, products: [], all: false))
            options.bundleIds = ["com.example.app", "com.other.app"]
            let (configured, _) = try await world.run(options)
            #expect(configured.receipts["verified"] == 2)
            #expect(try await world.entitlements()["apple-says-other/lifetime"]?.entitled == true)
        }
    }

    /// Item 3: a value PostgreSQL cannot store fails its receipt with a reason; the ordinary
    /// accounts of the same batch are corrected, and the run completes, tonight and every night.
    @Test func anUnstorableValueFailsItsReceiptNotTheBatch() async throws {
        // An iOS 6 transaction receipt whose original transaction id holds a NUL byte.
        let purchaseInfo = Data("{ \"bid\" = \"com.example.app\"; \"original-transaction-id\" = \"3\u{0}3\"; \"transaction-id\" = \"33\"; }".utf8)
        let legacy = Data("{ \"purchase-info\" = \"\(purchaseInfo.base64EncodedString())\"; }".utf8).base64EncodedString()
        let scenario: [String: Any] = ["receipts": [legacy: ["generate": ["purchases": [["product_id": "lifetime", "transaction_id": "33"]]]]]]
        try await RunWorld.with("unstorable", scenario: scenario) { world in
            try await world.addReceipt("nul-in-receipt", legacy)
            func answer(_ transaction: [String: Any]) -> [String: Any] {
                ["response": ["status": 0, "environment": "Production", "receipt": ["bundle_id": "com.example.app", "in_app": [
                    ["transaction_id": "1", "original_transaction_id": "1", "product_id": "lifetime", "purchase_date_ms": "1700000000000",
                     "quantity": "1"].merging(transaction) { $1 },
                ]]]]
            }
            try await world.addReceipt("nul-from-apple", spec: answer(["product_id": "life\u{0}time", "transaction_id": "31"]))
            try await world.addReceipt("far-future", spec: answer(["expires_date_ms": "400000000000000", "transaction_id": "32"]))
            try await world.addReceipt("huge-number", spec: answer(["quantity": "99999999999", "transaction_id": "34"]))
            for account in ["nul-in-receipt", "nul-from-apple", "far-future", "huge-number"] {
                try await Self.payingCustomer(world, account, original: "9\(account.count)")
            }
            for index in 0..<4 { try await Self.ordinaryAccount(world, "ordinary\(index)", original: "5\(index)") }
            let before = try await world.entitlements()

            for night in 1...2 {
                var options = world.options(selection: .due(staleAfter: 0))
                options.failedRetryAfter = 0  // due again the next night
                options.batchSize = 100  // the odd receipts share one batch with the ordinary accounts
                let (summary, ending) = try await world.run(options)
                #expect(ending == .completed, "night \(night)")
                #expect(summary.status == "completed")
                #expect(summary.accountsFailed == 4, "night \(night)")
                #expect(summary.accountsVerified == 4)
                for account in ["nul-in-receipt", "nul-from-apple", "far-future", "huge-number"] {
                    #expect(try await world.entitlements()["\(account)/pro.monthly"] == before["\(account)/pro.monthly"], "\(account)")
                }
                let reasons = try await world.connection.query("""
                    SELECT account_id, last_outcome FROM iap.app_receipts WHERE last_outcome <> 'verified' ORDER BY account_id
                    """).map { try $0.decode("account_id", as: String.self) + ":" + $0.decode("last_outcome", as: String.self) }
                #expect(reasons == ["far-future:failed", "huge-number:failed", "nul-from-apple:failed", "nul-in-receipt:failed"])
            }
            #expect(try await world.count("SELECT count(*) FROM iap.entitlements WHERE account_id LIKE 'ordinary%' AND entitled") == 4)
            #expect(try await world.count("SELECT count(*) FROM iap.transactions WHERE account_id NOT LIKE 'ordinary%'") == 0)
            let failures = try String(contentsOf: try #require(try world.lastReportDirectory()).appending(path: "failures.csv"), encoding: .utf8)
            #expect(failures.contains("NUL byte"))
            #expect(failures.contains("outside the years 1 to 9999"))
            #expect(failures.contains("quantity is past the range"))
            #expect(!failures.contains("\u{0}"))
        }
    }
}
