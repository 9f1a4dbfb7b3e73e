import AppStoreModels
import Foundation
import Postgres
import Storage
import Testing
import TestSupport
@testable import WorldSupport

/// The journal right on the path most adopters take first (docs/reports.md, "Right on every
/// path"), through the executable against the simulator: the stored receipts through verifyReceipt
/// (no prices), then Apple's signed data through the App Store Server API. Each case is one of
/// issue 51's, its money worked out by hand.
@Suite struct JournalPathsCLITests {
    /// The receipts: a subscription paid 4.49 EUR twice, a pay-up-front introductory offer paid
    /// 2.99, a non-consumable bought at 29.99 and refunded 50 % (the catalog says 19.99), and a
    /// subscription restored on a second device (a second transaction id, the same web order
    /// line item). Apple's signed terms: what verifyReceipt never says.
    static func receipts(now: Int64) -> [String: [String: Any]] {
        let day: Int64 = 86_400_000
        func subscription(_ original: String, renewals: Int, restored: Bool = false) -> [String: Any] {
            ["product_id": "pro.monthly", "original_transaction_id": original, "renewals": renewals, "trial": false,
             "restored_copy": restored, "start_ms": now - Int64(renewals) * 30 * day + 10 * day, "period_ms": 30 * day]
        }
        return [
            "eur": ["generate": ["subscriptions": [subscription("7100", renewals: 2)]]],
            "offer": ["generate": ["subscriptions": [subscription("7200", renewals: 1)]]],
            "life": ["generate": ["purchases": [["product_id": "lifetime", "transaction_id": "7300", "purchase_ms": now - 20 * day,
                                                 "cancel": ["at_ms": now - 5 * day, "reason": 0]]]]],
            "restore": ["generate": ["subscriptions": [subscription("7400", renewals: 1, restored: true)]]],
        ]
    }

    static var signedTerms: [String: [String: Any]] { [
        "7100": ["price": 4490, "currency": "EUR", "storefront": "DEU"],
        "7100001": ["price": 4490, "currency": "EUR", "storefront": "DEU"],
        "7200": ["price": 2990, "currency": "USD", "offerType": 1, "offerDiscountType": "PAY_UP_FRONT"],
        "7300": ["price": 29990, "currency": "USD", "revocationType": "REFUND_PRORATED", "revocationPercentage": 50000],
    ] }

    /// Net per account and currency, zeros left out: `account currency milliunits`.
    static func nets(_ world: RunWorld) async throws -> [String] {
        try await world.connection.query("""
            SELECT account_id, currency, sum(amount_milliunits)::bigint AS net FROM iap.finance_journal
            GROUP BY account_id, currency HAVING sum(amount_milliunits) <> 0 ORDER BY account_id, currency
            """).map { "\(try $0.decode("account_id", as: String.self)) \(try $0.decode("currency", as: String.self)) \(try $0.decode("net", as: Int64.self))" }
    }

    @Test func verifyReceiptFirstThenSignedDataEndsAtTheMoneyThatMoved() async throws {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let receipts = Self.receipts(now: now)
        let blobs = receipts.keys.sorted().map { syntheticReceipt(receipts[$0]!) }
        let scenario: [String: Any] = ["api": ["from_receipts": blobs, "signed_terms": Self.signedTerms] as [String: Any]]
        try await RunWorld.with("journal-paths", scenario: scenario) { world in
            try await world.connection.execute("""
                INSERT INTO iap.products (product_id, type, duration, price, currency) VALUES
                    ('pro.monthly', 'auto_renewable', 'P1M', 4.99, 'USD'), ('lifetime', 'non_consumable', NULL, 19.99, 'USD')
                """)
            for account in receipts.keys.sorted() { try await world.addReceipt(account, syntheticReceipt(receipts[account]!)) }
            try FileManager.default.createDirectory(at: world.reportRoot, withIntermediateDirectories: true)
            let key = world.reportRoot.appending(path: "AuthKey.p8")
            try Fixtures.privateKey(at: key)
            let environment = RunWorld.environment(world)
            let first = try await CLIProcess.run(["backfill", "--all", "--source", "verify-receipt", "--report-dir", world.reportRoot.path],
                                                 environment: environment)
            #expect(first.status == 0, "\(first.stderr)")
            // What verifyReceipt alone can know: the catalog's prices, in USD, the refund in full, the restore once.
            #expect(try await Self.nets(world) == ["eur USD 9980", "offer USD 4990", "restore USD 4990"])
            let second = try await CLIProcess.run(
                ["backfill", "--all", "--source", "server-api", "--report-dir", world.reportRoot.appending(path: "2").path]
                    + APIWorld.apiFlags(world, key: key), environment: environment)
            #expect(second.status == 0, "\(second.stderr)")
            // EUR 4.49 x 2, USD 0; the offer's 2.99; 29.99 - 14.995; the restored subscription still one sale.
            #expect(try await Self.nets(world) == ["eur EUR 8980", "life USD 14995", "offer USD 2990", "restore USD 4990"])
            // Told again, nothing moves.
            let third = try await CLIProcess.run(
                ["backfill", "--all", "--source", "server-api", "--report-dir", world.reportRoot.appending(path: "3").path]
                    + APIWorld.apiFlags(world, key: key), environment: environment)
            #expect(third.status == 0, "\(third.stderr)")
            let events = try await world.connection.query("SELECT count(*)::bigint AS n FROM iap.finance_journal")[0].decode("n", as: Int64.self)
            // eur: 2 sales + 2x2 currency adjustments; offer: sale + adjustment; life: sale, refund, 2 adjustments; restore: 1 sale.
            #expect(events == 6 + 2 + 4 + 1)
            // The export says which event each adjustment corrects, dated with it.
            let export = try await CLIProcess.run(["export-finance", "--from", "2020-01-01", "--to", "2100-01-01"], environment: environment)
            let lines = export.stdout.components(separatedBy: "\r\n")
            let adjustment = try #require(lines.first { $0.hasPrefix("adjustment,") && $0.contains(",7300,") && $0.hasSuffix(",refund") }, "\(export.stdout)")
            #expect(adjustment.contains(",4.995,signed,REFUND_PRORATED,50000,"), "\(adjustment)")
            #expect(lines.filter { $0.hasPrefix("adjustment,") && $0.contains(",7100,") && $0.hasSuffix(",purchase") }.count == 2)
            #expect(!lines.contains { $0.contains(",7400r,") }, "a restored copy is no sale")
        }
    }

    /// A refund Apple reversed, then the old REFUND notification again, signed before the reversal:
    /// stale, it changes nothing (before, the journal ended 19.99 short of what the customer paid).
    @Test func aStaleRefundAfterItsReversalMovesNoMoney() async throws {
        try await RunWorld.with("journal-stale") { world in
            try await V2Notifications.gamer(world)
            let refundedAt = world.nowMs - 7_200_000
            let signedRefund = refundedAt + 60_000
            let refund = V2Notifications.consumable("91", world: world, revokedAt: refundedAt)
            #expect(try await V2Notifications.ingest(world, [try V2Notifications.body("REFUND", transaction: refund, signedDate: signedRefund)]) == 1)
            _ = try await world.run(V2Notifications.options(world))
            let reversal = try V2Notifications.body("REFUND_REVERSED", transaction: V2Notifications.consumable("91", world: world),
                                                    signedDate: world.nowMs - 3_600_000)
            #expect(try await V2Notifications.ingest(world, [reversal]) == 1)
            _ = try await world.run(V2Notifications.options(world))
            // The REFUND again (history read late, another copy): its signedDate is before the reversal's.
            #expect(try await V2Notifications.ingest(world, [try V2Notifications.body("REFUND", transaction: refund, signedDate: signedRefund)]) == 1)
            _ = try await world.run(V2Notifications.options(world))
            let journal = try await world.connection.query("""
                SELECT event, amount_milliunits FROM iap.finance_journal WHERE transaction_id = '91' ORDER BY id
                """).map { "\(try $0.decode("event", as: String.self)) \(try $0.decode("amount_milliunits", as: Int64.self))" }
            #expect(journal == ["purchase 990", "refund -990", "refund_reversal 990"])
            let cancelled = try await world.connection.query("SELECT cancellation_date FROM iap.transactions WHERE transaction_id = '91'")[0]
            #expect(try cancelled.decode("cancellation_date", as: Date?.self) == nil, "the ledger keeps Apple's latest word")
        }
    }
}
