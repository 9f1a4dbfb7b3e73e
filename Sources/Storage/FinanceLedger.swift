import CivilCalendar
import Foundation
import Postgres
import Reconciliation

/// The ledger's finance events (contract section 7), streamed through a cursor so a year of a
/// large app exports in bounded memory. The CSV they become is `FinanceReport`'s.
public enum FinanceLedger {
    /// Events in `[from, to)`: `purchase` (transaction_id = original_transaction_id), `renewal`
    /// (the other transactions of subscriptions), `refund` (cancellation in the period, reason 0
    /// or 1, not an upgrade). Ordered by event time, then transaction id. Returns how many.
    public static func forEachEvent(
        connection: PostgresConnection, from: Date, to: Date, includeSandbox: Bool, _ body: (FinanceEvent) throws -> Void
    ) async throws -> Int {
        var rows = 0
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
                    try body(try event(row))
                    rows += 1
                }
            }
        }
        return rows
    }

    static func event(_ row: PostgresRow) throws -> FinanceEvent {
        guard let kind = FinanceEvent.Kind(rawValue: try row.decode("event")) else {
            throw PostgresError(code: .decoding, phase: .decode, message: "unknown finance event", column: "event")
        }
        return FinanceEvent(
            kind: kind, time: try row.decode("event_time"), accountId: try row.decode("account_id"), productId: try row.decode("product_id"),
            productType: try row.decode("product_type"), transactionId: try row.decode("transaction_id"),
            originalTransactionId: try row.decode("original_transaction_id"), webOrderLineItemId: try row.decode("web_order_line_item_id"),
            purchaseDate: try row.decode("purchase_date"), expiresDate: try row.decode("expires_date"),
            cancellationDate: try row.decode("cancellation_date"), cancellationReason: try row.decode("cancellation_reason"),
            quantity: try row.decode("quantity"), isTrialPeriod: try row.decode("is_trial_period"),
            isInIntroOfferPeriod: try row.decode("is_in_intro_offer_period"), offerCodeRefName: try row.decode("offer_code_ref_name"),
            promotionalOfferId: try row.decode("promotional_offer_id"), ownershipType: try row.decode("ownership_type"),
            environment: try row.decode("environment"), price: try row.decode("price"), currency: try row.decode("currency"))
    }
}
