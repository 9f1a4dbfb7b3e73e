import CivilCalendar
import Foundation
import Postgres
import Reconciliation

/// The finance journal (Migrations/0020; docs/reports.md, "The finance journal"), read: events
/// streamed through a cursor, so a year of a large app exports in bounded memory. The CSV they
/// become is `FinanceReport`'s.
public enum FinanceLedger {
    /// The advisory key journal writers hold shared until they commit (`FinanceJournal.record`).
    static let recordingKey: Int64 = 0x7272_6669_6E6A  // "rrfinj"

    /// "Now" for an export: a time at which every event recorded at or before it has committed,
    /// and after which every new event is recorded later. Taken while no journal writer is between
    /// stamping its rows and committing them (the exclusive side of `recordingKey`), then held a
    /// millisecond, the journal's precision, so that the next writer's stamp is past it. An export
    /// made with it is reproduced byte for byte by `--as-of` it later. It is also the latest
    /// `--as-of` an export accepts: events may still be recorded at or before a later time, so an
    /// export as of it could not be made again. (The journal's first recording stamps its events
    /// with the earlier time it was queued; every export as of that time or later is refused until
    /// it is finished: `JournalFirstRecording`.)
    public static func recordedUntilNow(connection: PostgresConnection) async throws -> Date {
        try await connection.withTransaction { connection in
            try await connection.execute("SELECT pg_advisory_xact_lock(\(recordingKey))")
            let now: Date = try await connection.query("SELECT date_trunc('milliseconds', clock_timestamp()) AS now")[0].decode("now")
            try await connection.execute("SELECT pg_sleep(0.002)")
            return now
        }
    }

    /// Which time of an event a period `[from, to)` bounds.
    public enum PeriodBasis: String, Sendable, CaseIterable {
        /// The event's own time (`event_time`): the period the money belongs to.
        case event
        /// When the journal recorded it (`recorded_at`): what a close made now must book, whatever
        /// period the events belong to (a refund learned late, an adjustment).
        case recorded
    }

    /// Events whose time (`by`) is in `[from, to)` and that were recorded at or before `asOf`.
    /// By event: ordered by event time, then transaction id, then event, then occurrence; by
    /// recorded: by recorded time first, then the same. Returns how many.
    ///
    /// Read in pages of `pageSize`, each a statement of its own after the last row of the one
    /// before, not in one transaction: a year of a big app's journal is tens of millions of rows,
    /// and a transaction open for the hours its export takes would hold back every vacuum. The
    /// pages are one consistent list all the same: the journal is append-only, and no event
    /// recorded at or before `asOf` can commit after it (`recordedUntilNow`).
    public static func forEachEvent(
        connection: PostgresConnection, by basis: PeriodBasis, from: Date, to: Date, includeSandbox: Bool, asOf: Date,
        pageSize: Int = 5_000, _ body: (FinanceEvent) throws -> Void
    ) async throws -> Int {
        // The last row's key, its times as PostgreSQL writes them: to the microsecond, which a
        // `Date` may not carry exactly.
        var last: (recordedAt: String, eventTime: String, transactionId: String, event: String, occurrence: Int)?
        var rows = 0
        while true {
            let page = try await connection.query(pageQuery(basis, from: from, to: to, includeSandbox: includeSandbox, asOf: asOf,
                                                            after: last, pageSize: pageSize))
            for row in page {
                try body(try event(row))
                rows += 1
            }
            guard page.count == pageSize, let row = page.last else { return rows }
            last = (try row.decode("page_recorded_at"), try row.decode("page_event_time"), try row.decode("transaction_id"),
                    try row.decode("event"), try row.decode("occurrence"))
        }
    }

    /// One page: a text for each order, and for the first page and the pages after, so that each
    /// is a range of the index that holds its whole order (Migrations/0037), read in that order
    /// with no sort. (An `IS NULL OR` over the last key would be planned as a read of the period:
    /// a time bound as text is cast when the page runs, not when it is planned.)
    static func pageQuery(
        _ basis: PeriodBasis, from: Date, to: Date, includeSandbox: Bool, asOf: Date,
        after last: (recordedAt: String, eventTime: String, transactionId: String, event: String, occurrence: Int)?, pageSize: Int
    ) -> PostgresQuery {
        switch (basis, last) {
        case (.event, nil): """
            SELECT *, recorded_at::text AS page_recorded_at, event_time::text AS page_event_time FROM iap.finance_journal
            WHERE event_time >= \(from) AND event_time < \(to) AND recorded_at <= \(asOf)
              AND (\(includeSandbox) OR environment IS DISTINCT FROM 'Sandbox')
            ORDER BY event_time, transaction_id, event, occurrence
            LIMIT \(pageSize)
            """
        case (.event, let last?): """
            SELECT *, recorded_at::text AS page_recorded_at, event_time::text AS page_event_time FROM iap.finance_journal
            WHERE event_time >= \(from) AND event_time < \(to) AND recorded_at <= \(asOf)
              AND (\(includeSandbox) OR environment IS DISTINCT FROM 'Sandbox')
              AND (event_time, transaction_id, event, occurrence)
                  > (\(last.eventTime)::timestamptz, \(last.transactionId)::text, \(last.event)::text, \(last.occurrence)::integer)
            ORDER BY event_time, transaction_id, event, occurrence
            LIMIT \(pageSize)
            """
        case (.recorded, nil): """
            SELECT *, recorded_at::text AS page_recorded_at, event_time::text AS page_event_time FROM iap.finance_journal
            WHERE recorded_at >= \(from) AND recorded_at < \(to) AND recorded_at <= \(asOf)
              AND (\(includeSandbox) OR environment IS DISTINCT FROM 'Sandbox')
            ORDER BY recorded_at, event_time, transaction_id, event, occurrence
            LIMIT \(pageSize)
            """
        case (.recorded, let last?): """
            SELECT *, recorded_at::text AS page_recorded_at, event_time::text AS page_event_time FROM iap.finance_journal
            WHERE recorded_at >= \(from) AND recorded_at < \(to) AND recorded_at <= \(asOf)
              AND (\(includeSandbox) OR environment IS DISTINCT FROM 'Sandbox')
              AND (recorded_at, event_time, transaction_id, event, occurrence)
                  > (\(last.recordedAt)::timestamptz, \(last.eventTime)::timestamptz, \(last.transactionId)::text, \(last.event)::text,
                     \(last.occurrence)::integer)
            ORDER BY recorded_at, event_time, transaction_id, event, occurrence
            LIMIT \(pageSize)
            """
        }
    }

    /// An account's money events, in the order they happened (`explain`).
    public static func events(accountId: String, connection: PostgresConnection) async throws -> [FinanceEvent] {
        try await connection.query("""
            SELECT * FROM iap.finance_journal
            WHERE transaction_id IN (SELECT transaction_id FROM iap.transactions WHERE account_id = \(accountId)) AND account_id = \(accountId)
            ORDER BY event_time, transaction_id, event, occurrence
            """).map(event)
    }

    static func event(_ row: PostgresRow) throws -> FinanceEvent {
        guard let kind = FinanceEvent.Kind(rawValue: try row.decode("event")) else {
            throw PostgresError(code: .decoding, phase: .decode, message: "unknown finance event", column: "event")
        }
        guard let source = FinanceEvent.AmountSource(rawValue: try row.decode("amount_source")) else {
            throw PostgresError(code: .decoding, phase: .decode, message: "unknown amount source", column: "amount_source")
        }
        var event = FinanceEvent(
            kind: kind, time: try row.decode("event_time"), accountId: try row.decode("account_id"), productId: try row.decode("product_id"),
            productType: try row.decode("product_type"), transactionId: try row.decode("transaction_id"),
            originalTransactionId: try row.decode("original_transaction_id"), webOrderLineItemId: try row.decode("web_order_line_item_id"),
            purchaseDate: try row.decode("purchase_date"), expiresDate: try row.decode("expires_date"),
            cancellationDate: try row.decode("cancellation_date"), cancellationReason: try row.decode("cancellation_reason"),
            quantity: try row.decode("quantity"), isTrialPeriod: try row.decode("is_trial_period"),
            isInIntroOfferPeriod: try row.decode("is_in_intro_offer_period"), offerCodeRefName: try row.decode("offer_code_ref_name"),
            promotionalOfferId: try row.decode("promotional_offer_id"), ownershipType: try row.decode("ownership_type"),
            environment: try row.decode("environment"), price: try row.decode("price_milliunits"), currency: try row.decode("currency"),
            recordedAt: try row.decode("recorded_at"))
        event.amount = try row.decode("amount_milliunits")
        event.amountSource = source
        event.revocationType = try row.decode("revocation_type")
        event.revocationPercentage = try row.decode("revocation_percentage")
        event.storefront = try row.decode("storefront")
        event.adjusts = try row.decode("adjusts", as: String?.self).flatMap(FinanceEvent.Kind.init(rawValue:))
        return event
    }
}
