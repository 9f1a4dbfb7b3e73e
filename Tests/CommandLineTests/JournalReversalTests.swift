import AppStoreModels
import Foundation
import Postgres
import Reconciliation
import Storage
import Testing
import TestSupport
@testable import WorldSupport

/// Apple's live answer and the journal (docs/reports.md, "Right on every path"; docs/database.md,
/// "The ledger"), through a run against the simulator: a refund Apple's answer no longer shows is
/// reversed though no REFUND_REVERSED came; a consumable's refund, which verifyReceipt never
/// shows, is not; and what a migration left owed is recorded by the next run.
@Suite struct JournalReversalTests {
    static func refund(_ id: String, product: String, type: String, price: Int, world: RunWorld) throws -> String {
        // After the first run's verification, before the second's answers.
        let refundedAt = Int64(Date().timeIntervalSince1970 * 1000)
        return try V2Notifications.body("REFUND", transaction: [
            "transactionId": id, "originalTransactionId": id, "productId": product, "type": type, "quantity": 1,
            "purchaseDate": world.nowMs - 10 * world.dayMs, "originalPurchaseDate": world.nowMs - 10 * world.dayMs,
            "inAppOwnershipType": "PURCHASED", "price": price, "currency": "USD", "revocationDate": refundedAt, "revocationReason": 0,
            "revocationType": "REFUND_FULL",
        ], signedDate: refundedAt)
    }

    static func journal(_ world: RunWorld, _ id: String) async throws -> [String] {
        try await world.connection.query("""
            SELECT event, amount_milliunits FROM iap.finance_journal WHERE transaction_id = \(id) ORDER BY id
            """).map { "\(try $0.decode("event", as: String.self)) \(try $0.decode("amount_milliunits", as: Int64?.self).map(String.init) ?? "-")" }
    }

    @Test func applesLiveAnswerDecidesARefundButNeverAConsumablesItCannotShow() async throws {
        try await RunWorld.with("journal-reversal") { world in
            try await world.catalog(["lifetime": .nonConsumable, "coins.100": .consumable])
            // Both listed in latest_receipt_info, neither cancelled there: Apple reinstated the
            // lifetime purchase; the consumable's refund verifyReceipt never shows.
            for (account, id, product) in [("ann", "95", "lifetime"), ("cat", "96", "coins.100")] {
                try await world.addReceipt(account, spec: ["generate": ["purchases": [
                    ["product_id": product, "transaction_id": id, "purchase_ms": world.nowMs - 10 * world.dayMs, "in_latest": true],
                ]]])
            }
            _ = try await world.run(V2Notifications.options(world))
            let refunds = [try Self.refund("95", product: "lifetime", type: "Non-Consumable", price: 19_990, world: world),
                           try Self.refund("96", product: "coins.100", type: "Consumable", price: 990, world: world)]
            #expect(try await V2Notifications.ingest(world, refunds) == 2)
            // The refunds applied, then both accounts re-verified in the same run.
            _ = try await world.run(V2Notifications.options(world))
            // The first run knew no price (the catalog has none); the signed REFUND brought it.
            let lifetime = try await Self.journal(world, "95"), coins = try await Self.journal(world, "96")
            #expect(lifetime == ["purchase -", "adjustment 19990", "refund -19990", "refund_reversal 19990"], "\(lifetime)")
            #expect(coins == ["purchase -", "adjustment 990", "refund -990"], "\(coins)")
            let reversedAt = try await world.connection.query("""
                SELECT event_time FROM iap.finance_journal WHERE transaction_id = '95' AND event = 'refund_reversal'
                """)[0].decode("event_time", as: Date.self)
            // When the answer came (this run), not the refund's time nor a day before.
            #expect(abs(reversedAt.timeIntervalSinceNow) < 600, "\(reversedAt)")
        }
    }

    @Test func whatAMigrationLeftOwedIsRecordedByTheNextRun() async throws {
        try await RunWorld.with("journal-backlog") { world in
            try await world.catalog(["lifetime": .nonConsumable])
            // As 0024 finds an older installation: a sale journaled at the catalog's 19.99, the
            // ledger holding Apple's signed 29.99 since.
            try await world.connection.execute("""
                INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, quantity,
                                              environment, price_milliunits, currency)
                VALUES ('98', 'dan', '98', 'lifetime', now() - interval '20 days', 1, 'Production', 29990, 'USD')
                """)
            try await world.connection.execute("""
                INSERT INTO iap.finance_journal (event, event_time, recorded_at, account_id, product_id, product_type, transaction_id,
                                                 original_transaction_id, price_milliunits, currency, amount_milliunits, amount_source)
                VALUES ('purchase', now() - interval '20 days', now() - interval '10 days', 'dan', 'lifetime', 'non_consumable', '98', '98',
                        19990, 'USD', 19990, 'catalog')
                """)
            try await world.connection.execute("INSERT INTO iap.journal_backlog VALUES ('98')")
            _ = try await world.run(V2Notifications.options(world))
            #expect(try await Self.journal(world, "98") == ["purchase 19990", "adjustment 10000"])
            #expect(try await world.connection.query("SELECT 1 FROM iap.journal_backlog").isEmpty)
        }
    }
}
