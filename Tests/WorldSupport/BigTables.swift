import Foundation
import Postgres
import TestSupport

/// A big app's tables in miniature, made in SQL (`generate_series`): `accounts` accounts verified
/// an hour ago (none due), each with a subscription of three ledger rows, an entitlement, two
/// processed notifications and three journal events. Big enough that PostgreSQL plans a query as
/// it would over millions of rows: an index where one serves, a scan where none does.
enum BigTables {
    static func fill(_ world: RunWorld, accounts: Int) async throws {
        try await world.connection.executeScript("""
            INSERT INTO iap.app_receipts (account_id, latest_receipt, environment, last_verified_at, last_status, last_outcome,
                                          receipt_original_transaction_ids, ledger_original_transaction_ids, created_at, updated_at)
            SELECT 'bulk-' || lpad(g::text, 8, '0'), 'AAAA', 'Production', now() - interval '1 hour', 0, 'verified',
                   ARRAY['9' || g], ARRAY['9' || g], now() - interval '60 days', now() - interval '1 hour'
            FROM generate_series(1, \(accounts)) g;
            INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date,
                                          original_purchase_date, expires_date, environment, source, price_milliunits, currency,
                                          web_order_line_item_id, cancellation_date)
            SELECT '8' || g || '0' || k, 'bulk-' || lpad(g::text, 8, '0'), '9' || g, 'bulk.monthly', now() - (k || ' months')::interval,
                   now() - interval '3 months', now() - ((k - 1) || ' months')::interval, 'Production', 'server_api', 4990, 'USD',
                   '7' || g || '0' || k, CASE WHEN g % 50 = 0 AND k = 3 THEN now() - interval '80 days' END
            FROM generate_series(1, \(accounts)) g, generate_series(1, 3) k;
            INSERT INTO iap.entitlements (account_id, product_id, original_transaction_id, latest_transaction_id, state, entitled,
                                          expires_at, environment, updated_at)
            SELECT 'bulk-' || lpad(g::text, 8, '0'), 'bulk.monthly', '9' || g, '8' || g || '01', 'active', true,
                   now() + interval '20 days', 'Production', now()
            FROM generate_series(1, \(accounts)) g;
            INSERT INTO iap.notifications (received_at, body, processed_at, outcome, account_id, notification_uuid, consumption_examined_at)
            SELECT now() - interval '2 days' + (g || ' seconds')::interval, jsonb_build_object('notificationType', 'DID_RENEW', 'n', g),
                   now() - interval '2 days' + (g || ' seconds')::interval, 'applied', 'bulk-' || lpad((g % \(accounts) + 1)::text, 8, '0'),
                   'bulk-' || g, now() - interval '2 days' + (g || ' seconds')::interval
            FROM generate_series(1, \(2 * accounts)) g;
            INSERT INTO iap.finance_journal (event, event_time, recorded_at, account_id, product_id, product_type, transaction_id,
                                             original_transaction_id, amount_source, price_milliunits, currency, amount_milliunits, environment)
            SELECT CASE k WHEN 3 THEN 'purchase' ELSE 'renewal' END, t, t,
                   'bulk-' || lpad(g::text, 8, '0'), 'bulk.monthly', 'auto_renewable', '8' || g || '0' || k, '9' || g, 'signed', 4990,
                   'USD', 4990, 'Production'
            FROM generate_series(1, \(accounts)) g, generate_series(1, 3) k,
                 LATERAL (SELECT now() - (k || ' months')::interval + (g || ' seconds')::interval AS t) d
            -- Appended as the money moved, as a journal is: its physical order is its time's.
            ORDER BY t;
            ANALYZE;
            """)
    }
}
