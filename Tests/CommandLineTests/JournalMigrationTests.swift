import Foundation
import Postgres
import SchemaMigrations
import Testing
import TestSupport

/// An installation whose journal was recorded before its rules moved into the program (migration
/// 0024; docs/reports.md, "Right on every path") converges when `migrate` runs: what the old rules
/// got wrong is adjusted, and nothing already right changes.
@Suite struct JournalMigrationTests {
    @Test func migrateRecordsWhatTheOldJournalOwes() async throws {
        let database = try await TestDatabase.create("journal-migrate")
        let connection = try await database.connect()
        try await Migrator(migrations: Migration.bundled.filter { $0.version < "0024" }, logger: .quiet).migrate(connection)
        try await connection.execute("""
            INSERT INTO iap.products (product_id, type, duration, price, currency) VALUES
                ('pro.monthly', 'auto_renewable', 'P1M', 4.99, 'USD'), ('lifetime', 'non_consumable', NULL, 19.99, 'USD')
            """)
        // A subscription and its copy restored on another device on 2026-10-12 (one web order line item), and a
        // non-consumable refunded, all first told by verifyReceipt: no prices, no revocation type.
        try await connection.execute("""
            INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date,
                                          expires_date, web_order_line_item_id, cancellation_date, cancellation_reason, quantity, environment)
            VALUES ('a1', 'ana', 'a1', 'pro.monthly', '2026-10-03 10:00Z', '2026-11-03 10:00Z', 'w1', NULL, NULL, 1, 'Production'),
                   ('a2', 'ana', 'a1', 'pro.monthly', '2026-10-12 10:00Z', '2026-11-03 10:00Z', 'w1', NULL, NULL, 1, 'Production'),
                   ('n1', 'ben', 'n1', 'lifetime', '2026-10-05 10:00Z', NULL, NULL, '2026-10-20 10:00Z', 0, 1, 'Production'),
                   ('u1', 'cy', 'u1', 'lifetime', '2026-10-06 10:00Z', NULL, NULL, NULL, NULL, 1, 'Production')
            """)
        try await connection.execute("SELECT iap.record_finance_events(ARRAY['a1', 'a2', 'n1', 'u1'])")
        // Then Apple's signed terms, written by the old upsert, which journaled nothing for them.
        try await connection.execute("""
            UPDATE iap.transactions SET price_milliunits = 4490, currency = 'EUR' WHERE transaction_id IN ('a1', 'a2');
            """)
        try await connection.execute("""
            UPDATE iap.transactions SET price_milliunits = 29990, currency = 'USD', revocation_type = 'REFUND_PRORATED',
                                        revocation_percentage = 50000 WHERE transaction_id = 'n1'
            """)
        let environment = ["DATABASE_URL": database.connectionString]
        let migrate = try await CLIProcess.run(["migrate"], environment: environment)
        #expect(migrate.status == 0, "\(migrate.stderr)")
        // a1+a2: two sales of 4.99 USD become one of 4.49 EUR: the restored copy's reversed at its
        // own time (-4.99), then the sale's -4.99 USD, +4.49 EUR. n1: the sale +10.00 (19.99 to
        // 29.99), the refund +4.995 (-19.99 to -14.995).
        #expect(migrate.stdout.contains("Recorded 5 finance journal event(s)"), "\(migrate.stdout)")
        let nets = try await connection.query("""
            SELECT account_id, currency, sum(amount_milliunits)::bigint AS net FROM iap.finance_journal
            GROUP BY account_id, currency HAVING sum(amount_milliunits) <> 0 ORDER BY account_id, currency
            """).map { "\(try $0.decode("account_id", as: String.self)) \(try $0.decode("currency", as: String.self)) \(try $0.decode("net", as: Int64.self))" }
        #expect(nets == ["ana EUR 4490", "ben USD 14995", "cy USD 19990"])
        let adjustments = try await connection.query("""
            SELECT transaction_id, adjusts, amount_milliunits, to_char(event_time AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day
            FROM iap.finance_journal WHERE event = 'adjustment' ORDER BY id
            """).map { "\(try $0.decode("transaction_id", as: String.self)) \(try $0.decode("adjusts", as: String.self)) \(try $0.decode("amount_milliunits", as: Int64.self)) \(try $0.decode("day", as: String.self))" }
        // Each at the time of the event it corrects.
        #expect(adjustments == ["n1 purchase 10000 2026-10-05", "n1 refund 4995 2026-10-20", "a2 renewal -4990 2026-10-12",
                                "a1 purchase -4990 2026-10-03", "a1 purchase 4490 2026-10-03"])
        // Done once: the backlog is empty, and migrating again records nothing.
        let again = try await CLIProcess.run(["migrate"], environment: environment)
        #expect(again.status == 0 && !again.stdout.contains("Recorded"), "\(again.stdout)")
        #expect(try await connection.query("SELECT 1 FROM iap.journal_backlog").isEmpty)
        await connection.close()
        try await database.drop()
    }
}
