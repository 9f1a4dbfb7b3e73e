import CivilCalendar
import Foundation
import Postgres
import Reconciliation

/// The finance audit CSV (contract section 7), streamed from the ledger through a cursor so a
/// year of a large app exports in bounded memory.
public enum FinanceExport {
    public static let columns = [
        "event", "event_time", "account_id", "product_id", "product_type", "transaction_id", "original_transaction_id",
        "web_order_line_item_id", "purchase_date", "expires_date", "cancellation_date", "cancellation_reason", "quantity",
        "is_trial_period", "is_in_intro_offer_period", "offer_code_ref_name", "promotional_offer_id", "ownership_type",
        "environment", "price", "currency",
    ]

    /// Events in `[from, to)`: `purchase` (transaction_id = original_transaction_id), `renewal`
    /// (the other transactions of subscriptions), `refund` (cancellation in the period, reason 0
    /// or 1, not an upgrade). Ordered by event time, then transaction id. `write` gets CSV text in
    /// chunks, header first.
    public static func export(
        connection: PostgresConnection, from: Date, to: Date, includeSandbox: Bool, formulaSafe: Bool = true,
        write: (String) throws -> Void
    ) async throws -> Int {
        var rows = 0
        var buffer = CSV.row(columns)
        try await connection.withCursor("""
            WITH ledger AS (
                SELECT t.*, COALESCE(p.type, CASE WHEN t.expires_date IS NOT NULL THEN 'auto_renewable' ELSE 'non_consumable' END)
                           AS product_type,
                       -- The transaction's own price where Apple's signed data gave it; the catalog's otherwise.
                       CASE WHEN t.price_milliunits IS NOT NULL THEN trim_scale(t.price_milliunits::numeric / 1000)::text
                            ELSE p.price::text END AS event_price,
                       CASE WHEN t.price_milliunits IS NOT NULL THEN t.currency ELSE p.currency END AS event_currency
                FROM iap.transactions t LEFT JOIN iap.products p USING (product_id)
                WHERE \(includeSandbox) OR t.environment IS DISTINCT FROM 'Sandbox'
            ), events AS (
                SELECT CASE WHEN transaction_id = COALESCE(original_transaction_id, transaction_id) THEN 'purchase' ELSE 'renewal' END
                           AS event, purchase_date AS event_time, ledger.*
                FROM ledger
                WHERE purchase_date >= \(from) AND purchase_date < \(to)
                  AND (transaction_id = COALESCE(original_transaction_id, transaction_id)
                       OR product_type IN ('auto_renewable', 'non_renewing'))
                UNION ALL
                SELECT 'refund', cancellation_date, ledger.*
                FROM ledger
                WHERE cancellation_date >= \(from) AND cancellation_date < \(to)
                  AND COALESCE(cancellation_reason, 0) IN (0, 1) AND is_upgraded IS NOT TRUE
            )
            SELECT event, event_time, account_id, product_id, product_type, transaction_id, original_transaction_id,
                   web_order_line_item_id, purchase_date, expires_date, cancellation_date, cancellation_reason, quantity,
                   is_trial_period, is_in_intro_offer_period, offer_code_ref_name, promotional_offer_id, ownership_type,
                   environment, event_price AS price, event_currency AS currency
            FROM events ORDER BY event_time, transaction_id, event
            """, fetchSize: 5_000) { cursor in
            for try await batch in cursor {
                for row in batch {
                    buffer += CSV.row(try fields(row), formulaSafe: formulaSafe)
                    rows += 1
                }
                try write(buffer)
                buffer = ""
            }
        }
        if !buffer.isEmpty { try write(buffer) }
        return rows
    }

    static func fields(_ row: PostgresRow) throws -> [String?] {
        func time(_ column: String) throws -> String? { try row.decode(column, as: Date?.self).map { Timestamp.format($0) } }
        func flag(_ column: String) throws -> String? { try row.decode(column, as: Bool?.self).map { $0 ? "true" : "false" } }
        func text(_ column: String) throws -> String? { try row.decode(column, as: String?.self) }
        return [
            try text("event"), try time("event_time"), try text("account_id"), try text("product_id"), try text("product_type"),
            try text("transaction_id"), try text("original_transaction_id"), try text("web_order_line_item_id"),
            try time("purchase_date"), try time("expires_date"), try time("cancellation_date"), try text("cancellation_reason"),
            try text("quantity"), try flag("is_trial_period"), try flag("is_in_intro_offer_period"), try text("offer_code_ref_name"),
            try text("promotional_offer_id"), try text("ownership_type"), try text("environment"), try text("price"),
            try text("currency"),
        ]
    }
}
