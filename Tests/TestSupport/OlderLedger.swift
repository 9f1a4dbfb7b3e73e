import Foundation
import Postgres

/// A ledger as a database older than the finance journal holds it (the schema before
/// Migrations/0010), made in SQL: what `migrate` must carry over on a big database.
public enum OlderLedger {
    /// Chains of `renewals` transactions (a purchase and its renewals, a month apart), their ids
    /// spread by md5 so that chunks cut chains anywhere; every 50th chain with a restored copy of
    /// its first renewal (same web order line item, another transaction id); every 20th with its
    /// last renewal refunded; every 10th account with a lifetime purchase.
    public static let renewals = 10
    static let sql = """
        INSERT INTO iap.products (product_id, type, duration, price, currency) VALUES
            ('pro.monthly', 'auto_renewable', '1 month', 4.99, 'USD'), ('lifetime', 'non_consumable', NULL, 29.99, 'USD');
        INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, original_purchase_date,
                                      expires_date, cancellation_date, cancellation_reason, web_order_line_item_id, quantity, environment)
        SELECT md5('t' || i || '.' || r), 'a' || i, md5('t' || i || '.0'), 'pro.monthly', p, timestamptz '2025-01-01' + (i % 28) * interval '1 day',
               p + interval '1 month', CASE WHEN i % 20 = 0 AND r = $2::int - 1 THEN p + interval '3 days' END,
               CASE WHEN i % 20 = 0 AND r = $2::int - 1 THEN 0 END, 'w' || i || '.' || r, 1, 'Production'
        FROM generate_series(1, $1::int) i, generate_series(0, $2::int - 1) r,
             LATERAL (SELECT timestamptz '2025-01-01' + (i % 28) * interval '1 day' + r * interval '1 month' AS p) d;
        INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, original_purchase_date,
                                      expires_date, web_order_line_item_id, quantity, environment)
        SELECT md5('copy' || i), 'a' || i, md5('t' || i || '.0'), 'pro.monthly', d.p, timestamptz '2025-01-01' + (i % 28) * interval '1 day',
               d.p + interval '1 month', 'w' || i || '.1', 1, 'Production'
        FROM generate_series(50, $1::int, 50) i, LATERAL (SELECT timestamptz '2025-02-01' + (i % 28) * interval '1 day' AS p) d;
        INSERT INTO iap.transactions (transaction_id, account_id, original_transaction_id, product_id, purchase_date, original_purchase_date,
                                      quantity, environment)
        SELECT md5('life' || i), 'a' || i, md5('life' || i), 'lifetime', timestamptz '2025-03-01', timestamptz '2025-03-01', 1, 'Production'
        FROM generate_series(10, $1::int, 10) i;
        INSERT INTO iap.notifications (received_at, body, processed_at, outcome, account_id)
        SELECT timestamptz '2025-06-01' + i * interval '1 second', jsonb_build_object('notification_type', 'DID_RENEW', 'n', i),
               timestamptz '2025-06-02', 'applied', 'a' || i
        FROM generate_series(1, $1::int) i;
        """

    /// `chains` chains of ledger rows, their products, and a notification per chain.
    public static func fill(_ connection: PostgresConnection, chains: Int) async throws {
        try await connection.executeScript(sql.replacingOccurrences(of: "$1", with: "\(chains)").replacingOccurrences(of: "$2", with: "\(renewals)"))
        try await connection.execute("ANALYZE")
    }

    /// The ledger rows `fill` makes.
    public static func rows(chains: Int) -> Int { chains * renewals + chains / 50 + chains / 10 }
}
