import Foundation
import Jobs
import Postgres
import Reconciliation
import Storage
import TestSupport
import Testing
@testable import WorldSupport

/// A run over Apple's real answers (`Tests/Fixtures/verify-responses`, served by the simulator
/// for given blobs) lands what those answers say. Every expected value below was read by hand
/// from the answer files and their PROVENANCE.md entries, with docs/guarantees.md, "Entitlement rules" applied by
/// hand; none was copied from the job's output. The run's clock is today, so every subscription
/// in these answers (2014-2021) has long expired.
@Suite(.serialized) struct RealAnswerTests {
    /// Account, the answer it gets, the environment Apple has the receipt in, the receipt's bundle.
    static let answers: [(account: String, file: String, environment: String, bundle: String)] = [
        ("griddiary", "linjunpop-receipt_verifier-receipt.json", "Sandbox", "com.sumiapp.GridDiary"),
        ("monza", "gabrielgarza-monza-cancellation_response.json", "Sandbox", "com.example.app"),
        ("mozilla", "mozilla-bigquery-etl-parse_apple_receipt.json", "Sandbox", "org.mozilla.ios.FirefoxVPN"),
        ("family", "alexalok-AppleReceiptVerifier.NET-Valid_Production_Family_Shared.json", "Production", "com.myapp.app"),
        ("retryable", "bk-rs-apple-apis-rs-response_body-status21104.json", "Production", "com.example.app"),
        ("unauthorized", "bk-rs-apple-apis-rs-response_body-status21010.json", "Production", "com.example.app"),
        ("revenuecat", "revenuecat-verifyReceiptSample1.json", "Sandbox", "com.revenuecat.sampleapp"),
    ]

    /// The blob each account stores: RevenueCat's real receipt (whose answer the file is), so the
    /// local decode reads it too; for the others a blob of our own, as the answers' receipts are
    /// not published.
    static func blob(_ account: String) throws -> String {
        account == "revenuecat"
            ? String(decoding: try Fixtures.bytes("receipts/revenuecat-base64encodedreceiptsample1.b64"), as: UTF8.self)
                .filter { !$0.isWhitespace }
            : Data("real-answer-\(account)".utf8).base64EncodedString()
    }

    static func scenario() throws -> [String: Any] {
        var receipts: [String: Any] = [:]
        for answer in answers {
            receipts[try blob(answer.account)] = [
                "environment": answer.environment,
                "response_file": TestPaths.fixtures.appending(path: "verify-responses/\(answer.file)").path,
            ]
        }
        return ["receipts": receipts]
    }

    @Test func aRunOverRealAnswersLandsWhatTheySay() async throws {
        try await RunWorld.with("real-answers", scenario: try Self.scenario()) { world in
            // GridDiary's one-time purchases, as its catalog says (nothing types them otherwise).
            try await world.catalog(["com.sumiapp.GridDiary.pro": .nonConsumable, "com.sumiapp.griddiary.test": .nonConsumable])
            for answer in Self.answers {
                try await world.connection.execute("""
                    INSERT INTO iap.app_receipts (account_id, bundle_id, latest_receipt)
                    VALUES (\(answer.account), \(answer.bundle), \(try Self.blob(answer.account)))
                    """)
            }
            // What the app server believes today: each of these accounts has access.
            let stored: [(String, String)] = [
                ("monza", "com.example.product_id"), ("mozilla", "org.mozilla.ios.FirefoxVPN.product.1_month_subscription"),
                ("family", "com.myapp.app.week2"), ("retryable", "pro.monthly"), ("unauthorized", "pro.monthly"),
            ]
            for (account, product) in stored {
                try await world.connection.execute("""
                    INSERT INTO iap.entitlements (account_id, product_id, original_transaction_id, state, entitled, expires_at,
                                                  environment, updated_at)
                    VALUES (\(account), \(product), 'stored', 'active', true, '2027-01-01T00:00:00Z', 'Production', now())
                    """)
            }

            let (summary, ending) = try await world.run(world.options())
            #expect(ending == .completed)
            #expect(summary.accountsProcessed == 7)
            let entitlements = try await world.entitlements()

            // GridDiary: two in_app purchases without an expiry and no latest_receipt_info:
            // non-consumables, active for ever, granted from the sandbox.
            for (product, original) in [("com.sumiapp.GridDiary.pro", "1000000118990828"), ("com.sumiapp.griddiary.test", "1000000122102348")] {
                let entitlement = try #require(entitlements["griddiary/\(product)"])
                #expect(entitlement.state == .active)
                #expect(entitlement.entitled)
                #expect(entitlement.expiresAt == nil)
                #expect(entitlement.originalTransactionId == original)
                #expect(entitlement.environment == "Sandbox")
            }

            // Monza: the current transaction is 1000000218147651 (greatest expiry, 1466127448000,
            // in in_app), cancelled at 1466127848000 without is_upgraded: refunded.
            let monza = try #require(entitlements["monza/com.example.product_id"])
            #expect(monza.state == .refunded)
            #expect(!monza.entitled)
            #expect(monza.latestTransactionId == "1000000218147651")
            #expect(monza.originalTransactionId == "1000000218147500")
            #expect(monza.expiresAt == Date(ms: 1_466_127_448_000))
            #expect(monza.refundedAt == Date(ms: 1_466_127_848_000))

            // Mozilla: latest_receipt_info's 1000000762449239 expires last (1610071825000) and
            // was cancelled at 1610071836000, reason 0: refunded.
            let mozilla = try #require(entitlements["mozilla/org.mozilla.ios.FirefoxVPN.product.1_month_subscription"])
            #expect(mozilla.state == .refunded)
            #expect(mozilla.latestTransactionId == "1000000762449239")
            #expect(mozilla.refundedAt == Date(ms: 1_610_071_836_000))

            // Family: one product, two family-shared chains; 540000823485156 expires last
            // (1637068065000), its renewal info says no retry and no grace: expired.
            let family = try #require(entitlements["family/com.myapp.app.week2"])
            #expect(family.state == .expired)
            #expect(!family.entitled)
            #expect(family.latestTransactionId == "540000823485156")
            #expect(family.expiresAt == Date(ms: 1_637_068_065_000))
            #expect(family.ownershipType == "FAMILY_SHARED")
            #expect(family.environment == "Production")

            // RevenueCat: one chain, 1000000692878476, across two products; both expired in 2020.
            let monthly = try #require(entitlements["revenuecat/com.revenuecat.monthly_4.99.1_week_intro"])
            #expect(monthly.latestTransactionId == "1000000692906727")
            #expect(monthly.expiresAt == Date(ms: 1_594_764_800_000))
            #expect(monthly.state == .expired)
            let annual = try #require(entitlements["revenuecat/com.revenuecat.annual_39.99.2_week_intro"])
            #expect(annual.latestTransactionId == "1000000696553650")
            #expect(annual.expiresAt == Date(ms: 1_595_443_146_000))
            #expect(annual.state == .expired)
            #expect(annual.autoRenew == true)  // pending_renewal_info's auto_renew_status "1"

            // 21104 (is_retryable) and 21010: the accounts did not verify, so nothing of theirs changed.
            for account in ["retryable", "unauthorized"] {
                let untouched = try #require(entitlements["\(account)/pro.monthly"])
                #expect(untouched.state == .active && untouched.entitled)
                #expect(untouched.expiresAt == Date(ms: 1_798_761_600_000))  // 2027-01-01
            }
            let receipts = try await world.connection.query(
                "SELECT account_id, last_status, last_outcome, next_attempt_at IS NOT NULL AS due_later FROM iap.app_receipts ORDER BY account_id")
            let byAccount = Dictionary(uniqueKeysWithValues: try receipts.map {
                (try $0.decode("account_id", as: String.self),
                 (try $0.decode("last_status", as: Int?.self), try $0.decode("last_outcome", as: String.self), try $0.decode("due_later", as: Bool.self)))
            })
            #expect(byAccount["retryable"]?.0 == 21104)
            #expect(byAccount["retryable"]?.1 == "deferred")
            #expect(byAccount["unauthorized"]?.0 == 21010)
            #expect(byAccount["unauthorized"]?.1 == "failed")
            for account in ["griddiary", "monza", "mozilla", "family", "revenuecat"] {
                #expect(byAccount[account]?.0 == 0)
                #expect(byAccount[account]?.1 == "verified")
            }

            // The ledger: one row per transaction id in in_app and latest_receipt_info together.
            let ledger = try await world.connection.query("""
                SELECT account_id, count(*)::int AS rows, count(cancellation_date)::int AS cancelled,
                       count(*) FILTER (WHERE environment = 'Sandbox')::int AS sandbox
                FROM iap.transactions GROUP BY account_id ORDER BY account_id
                """)
            let rows = Dictionary(uniqueKeysWithValues: try ledger.map {
                (try $0.decode("account_id", as: String.self),
                 [try $0.decode("rows", as: Int.self), try $0.decode("cancelled", as: Int.self), try $0.decode("sandbox", as: Int.self)])
            })
            #expect(rows == [
                "griddiary": [2, 0, 2], "monza": [2, 2, 2], "mozilla": [2, 2, 2], "family": [2, 0, 0], "revenuecat": [9, 0, 9],
            ])
            // Mozilla's ids are JSON numbers in in_app and text in latest_receipt_info: the same ids either way.
            #expect(try await world.count("""
                SELECT count(*) FROM iap.transactions WHERE account_id = 'mozilla' AND original_transaction_id = '1000000762442282'
                  AND transaction_id IN ('1000000762442282', '1000000762449239') AND cancellation_reason = 0
                """) == 2)

            // RevenueCat's blob is its real receipt: the local decode read its bundle and chain.
            let local = try await world.connection.query(
                "SELECT receipt_bundle_id, receipt_original_transaction_ids::text AS originals FROM iap.app_receipts WHERE account_id = 'revenuecat'")
            #expect(try local[0].decode("receipt_bundle_id", as: String?.self) == "com.revenuecat.sampleapp")
            #expect(try local[0].decode("originals", as: String?.self) == "{1000000692878476}")
            // Its answer's latest_receipt is elided to "...": not a receipt, so the stored blob stays.
            #expect(try await world.count("SELECT count(*) FROM iap.app_receipts WHERE account_id = 'revenuecat' AND latest_receipt LIKE 'MII%'") == 1)
        }
    }
}
