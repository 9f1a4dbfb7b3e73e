import AppStoreModels
import Foundation
import Hashing
import Postgres
import Reconciliation

/// The finance journal, written (docs/reports.md, "The finance journal"): the rules are
/// `JournalRules`; this reads what they need, locks each sale, and appends what they say, in the
/// caller's transaction, so an event commits with the ledger change that revealed it.
public enum FinanceJournal {
    /// Records the money events these ledger rows reveal and the journal lacks. Returns how many.
    ///
    /// Writers hold `FinanceLedger.recordingKey` shared from before their rows are stamped until
    /// they commit (an export takes it exclusively to fix its "as of"), and each sale's own key
    /// exclusively, taken in order: two writers of one sale (a restored copy on another shard)
    /// take turns, and the second sees what the first recorded.
    ///
    /// Rows written by others (the backlog, the first recording) are read again once their sales'
    /// locks are held: a writer of one of these sales that committed while this waited is then
    /// seen whole, its ledger change beside its events. Read only before, its refund would look
    /// like one the ledger no longer shows, and be reversed. `recordedAt` stamps the events
    /// instead of the clock (the first recording's one time), of each sale with no event recorded
    /// after it: one a night recorded meanwhile gets the clock, after its own events.
    @discardableResult
    static func record(_ transactionIds: [String], recordedAt: Date? = nil, connection: PostgresConnection) async throws -> Int {
        guard !transactionIds.isEmpty else { return 0 }
        return try await record(
            rows: try await ledgerRows(transactionIds, connection: connection), readAgainWhenLocked: true, recordedAt: recordedAt,
            connection: connection)
    }

    /// `record` of rows already read as `ledgerRows` reads them (the ledger upsert returns them,
    /// written in this transaction: no other writer can change them before it commits).
    @discardableResult
    static func record(
        rows: [String: JournalTransaction], readAgainWhenLocked: Bool = false, recordedAt: Date? = nil, connection: PostgresConnection
    ) async throws -> Int {
        guard !rows.isEmpty else { return 0 }
        var rows = rows
        try await connection.execute("SELECT pg_advisory_xact_lock_shared(\(FinanceLedger.recordingKey))")
        var keyOf = rows.mapValues(JournalRules.saleKey)
        var keys = Array(Set(keyOf.values)).sorted()
        try await lockSales(keys, connection: connection)
        // Read again until every key the rows now have is locked: a sale whose key changed
        // meanwhile (its product's type learned) is locked too, after the others (out of order: a
        // deadlock, which PostgreSQL ends and the caller's retry takes again, is the rare price),
        // and its rows read once more under that lock.
        while readAgainWhenLocked {
            rows = try await ledgerRows(Array(rows.keys), connection: connection)
            keyOf = rows.mapValues(JournalRules.saleKey)
            let more = Set(keyOf.values).subtracting(keys).sorted()
            guard !more.isEmpty else { break }
            try await lockSales(more, connection: connection)
            keys = (keys + more).sorted()
        }
        let stamp: Date = try await connection.query("SELECT date_trunc('milliseconds', clock_timestamp()) AS stamp")[0].decode("stamp")
        // Rows recorded before sales had keys are found by their own transaction id.
        var recorded: [String: [JournalRecord]] = [:]
        var recordKeyOf: [String: String] = [:]
        // When each sale's events were last recorded: `recordedAt` stamps only a sale with none
        // recorded after it (a night that recorded the sale meanwhile keeps it in time order).
        var latestRecorded: [String: Date] = [:]
        // Events of a row's transaction under another key than its own (or none: recorded before
        // sales had keys) are looked up by its transaction id, a row first written now too (one
        // deleted by hand and written again keeps its events); its key finds the rest.
        let looked = keyOf.map { (id: $0.key, key: $0.value) }
        // Key by key, through the indexes: a plan for `sale_key = ANY(...)` would be chosen from
        // statistics, and on a first night, whose journal grows faster than they follow, it was a
        // scan of the whole journal for every batch.
        for row in try await connection.query("""
            SELECT j.* FROM unnest(\(keys)::text[]) AS k(key)
                CROSS JOIN LATERAL (SELECT id, event, adjusts, transaction_id, event_time, amount_milliunits, currency, price_milliunits,
                                           amount_source, sale_key, recorded_at
                                    FROM iap.finance_journal WHERE sale_key = k.key OFFSET 0) j
            UNION
            SELECT j.* FROM unnest(\(looked.map(\.id))::text[], \(looked.map(\.key))::text[]) AS i(id, key)
                CROSS JOIN LATERAL (SELECT id, event, adjusts, transaction_id, event_time, amount_milliunits, currency, price_milliunits,
                                           amount_source, sale_key, recorded_at
                                    FROM iap.finance_journal WHERE transaction_id = i.id AND sale_key IS DISTINCT FROM i.key OFFSET 0) j
            ORDER BY id
            """) {
            let record = try Self.record(row)
            // A sale whose key changed (its product's type learned late) is still that sale.
            guard let key = try keyOf[record.transactionId] ?? row.decode("sale_key", as: String?.self) else { continue }
            recorded[key, default: []].append(record)
            recordKeyOf[record.transactionId] = recordKeyOf[record.transactionId] ?? key
            let at: Date = try row.decode("recorded_at")
            latestRecorded[key] = max(latestRecorded[key] ?? at, at)
        }
        // A recorded event's own row decides whether its refund still stands: read it too.
        let unread = Set(recordKeyOf.keys).subtracting(rows.keys)
        if !unread.isEmpty {
            for (id, row) in try await ledgerRows(Array(unread), connection: connection) {
                rows[id] = row
                keyOf[id] = keyOf[id] ?? recordKeyOf[id]
            }
        }
        // Each sale's rows: those of its key, and those its recorded events name. Grouped once:
        // a night's first batches carry thousands of sales.
        var rowsOfKey: [String: [String: JournalTransaction]] = [:]
        for (id, row) in rows {
            if let key = keyOf[id] { rowsOfKey[key, default: [:]][id] = row }
        }
        var appends: [(key: String, append: JournalAppend)] = []
        for key in keys {
            let records = recorded[key] ?? []
            var sale = rowsOfKey[key] ?? [:]
            for record in records where sale[record.transactionId] == nil { sale[record.transactionId] = rows[record.transactionId] }
            appends += JournalRules.appends(rows: Array(sale.values), recorded: records, now: stamp).map { (key, $0) }
        }
        guard !appends.isEmpty else { return 0 }
        return try await connection.execute("""
            INSERT INTO iap.finance_journal (
                event, event_time, occurrence, recorded_at, account_id, product_id, product_type, transaction_id, original_transaction_id,
                web_order_line_item_id, purchase_date, expires_date, cancellation_date, cancellation_reason, quantity, is_trial_period,
                is_in_intro_offer_period, offer_code_ref_name, promotional_offer_id, ownership_type, environment, price_milliunits,
                currency, amount_milliunits, amount_source, revocation_type, revocation_percentage, storefront, adjusts, sale_key)
            SELECT a.event, a.event_time, a.occurrence, a.recorded_at, t.account_id, t.product_id, a.product_type, t.transaction_id,
                   t.original_transaction_id, t.web_order_line_item_id, t.purchase_date, t.expires_date, t.cancellation_date,
                   t.cancellation_reason, t.quantity, t.is_trial_period, t.is_in_intro_offer_period, t.offer_code_ref_name,
                   t.promotional_offer_id, t.ownership_type, t.environment, a.price, a.currency, a.amount, a.amount_source,
                   t.revocation_type, t.revocation_percentage, t.storefront, a.adjusts, a.sale_key
            FROM unnest(
                \(PostgresArray(appends.map(\.append.kind.rawValue)))::text[],
                \(PostgresArray(appends.map(\.append.time)))::timestamptz[],
                \(PostgresArray(appends.map(\.append.occurrence)))::integer[],
                \(PostgresArray(appends.map { rows[$0.append.transactionId]?.productType.rawValue }))::text[],
                \(PostgresArray(appends.map(\.append.transactionId)))::text[],
                \(PostgresArray(appends.map(\.append.price)))::bigint[],
                \(PostgresArray(appends.map(\.append.currency)))::text[],
                \(PostgresArray(appends.map(\.append.amount)))::bigint[],
                \(PostgresArray(appends.map(\.append.amountSource.rawValue)))::text[],
                \(PostgresArray(appends.map { $0.append.adjusts?.rawValue }))::text[],
                \(PostgresArray(appends.map(\.key)))::text[],
                \(PostgresArray(appends.map { append in
                    recordedAt.flatMap { at in (latestRecorded[append.key] ?? at) <= at ? at : nil } ?? stamp
                }))::timestamptz[]) WITH ORDINALITY
                AS a(event, event_time, occurrence, product_type, transaction_id, price, currency, amount, amount_source, adjusts, sale_key,
                     recorded_at, n)
            -- Row by row through the key (as the lookup above): never a scan of the ledger.
            CROSS JOIN LATERAL (SELECT * FROM iap.transactions WHERE transaction_id = a.transaction_id OFFSET 0) t
            ORDER BY a.n
            ON CONFLICT (transaction_id, event, occurrence) DO NOTHING
            """)
    }

    /// Each sale's lock, in the order of their slots.
    static func lockSales(_ keys: [String], connection: PostgresConnection) async throws {
        try await connection.execute("""
            SELECT pg_advisory_xact_lock(\(saleLockSpace), k) FROM (SELECT DISTINCT k FROM unnest(\(PostgresArray(keys.map(saleLock)))::integer[]) k ORDER BY k) s
            """)
    }

    /// Records what the journal's backlog (Migrations/0024) asks to look at again, a thousand
    /// ledger rows a transaction. Returns how many events it recorded.
    @discardableResult
    public static func drainBacklog(connection: PostgresConnection) async throws -> Int {
        var recorded = 0
        while true {
            let (ids, events) = try await connection.withTransaction { connection in
                // A thousand rows, with every row of the backlog of the same chains: a sale's
                // copies (a restore) are looked at together.
                let ids: [String] = try await connection.query("""
                    WITH first AS (
                        SELECT transaction_id FROM iap.journal_backlog ORDER BY transaction_id LIMIT 1000 FOR UPDATE SKIP LOCKED
                    ), chains AS (
                        SELECT DISTINCT COALESCE(t.original_transaction_id, t.transaction_id) AS chain
                        FROM first JOIN iap.transactions t USING (transaction_id)
                    )
                    DELETE FROM iap.journal_backlog b
                    WHERE b.transaction_id IN (SELECT transaction_id FROM first)
                       -- A chain's rows: those naming it as their original, and the one that is it
                       -- (each through its index: COALESCE over both columns would read the ledger).
                       OR b.transaction_id IN (SELECT t.transaction_id FROM iap.transactions t JOIN chains c ON t.original_transaction_id = c.chain)
                       OR b.transaction_id IN (SELECT t.transaction_id FROM iap.transactions t JOIN chains c ON t.transaction_id = c.chain
                                               WHERE t.original_transaction_id IS NULL)
                    RETURNING b.transaction_id
                    """).map { try $0.decode("transaction_id") }
                return (ids, try await record(ids, connection: connection))
            }
            recorded += events
            if ids.isEmpty { return recorded }
        }
    }

    /// Advisory locks of sales: `pg_advisory_xact_lock(saleLockSpace, saleLock(key))`, a space
    /// of their own ("rj"), apart from the job's single-key locks. A thousand and twenty-four of
    /// them, sales sharing one: a night's first batch holds thousands of sales, and PostgreSQL's
    /// lock table is shared by every session (64 locks a connection by default).
    static let saleLockSpace: Int32 = 0x726A
    static func saleLock(_ key: String) -> Int32 {
        var hash = FNV1a()
        hash.combine(key)
        return Int32(hash.value % 1024)
    }

    static func ledgerRows(_ ids: [String], connection: PostgresConnection) async throws -> [String: JournalTransaction] {
        try journalTransactions(try await connection.query("""
            SELECT t.transaction_id, t.original_transaction_id, t.web_order_line_item_id, t.signed_product_type, t.expires_date,
                   t.purchase_date, t.original_purchase_date, t.cancellation_date, t.cancellation_reason, t.is_upgraded, t.is_trial_period, t.ownership_type,
                   t.offer_discount_type, t.price_milliunits, t.currency, t.revocation_type, t.revocation_percentage, t.apple_as_of,
                   p.type AS catalog_type, p.currency AS catalog_currency,
                   -- The catalog is the operator's: a price past a trillion is no price, never an overflow.
                   CASE WHEN p.price BETWEEN 0 AND 1e12 THEN round(p.price * 1000)::bigint END AS catalog_price
            FROM iap.transactions t LEFT JOIN iap.products p USING (product_id)
            WHERE t.transaction_id = ANY(\(ids))
            """))
    }

    /// Ledger rows with their catalog terms, as `ledgerRows` selects them, by transaction id.
    static func journalTransactions(_ selected: [PostgresRow]) throws -> [String: JournalTransaction] {
        var rows: [String: JournalTransaction] = [:]
        for row in selected {
            let signedType = try row.decode("signed_product_type", as: String?.self).flatMap(SignedProductType.init(rawValue:))
                .flatMap { signed in ProductType.allCases.first { $0.signedType == signed } }
            let catalogType = try row.decode("catalog_type", as: String?.self).flatMap(ProductType.init(rawValue:))
            let expires: Date? = try row.decode("expires_date")
            func price(_ amount: String, _ currency: String) throws -> Price? {
                guard let milliunits = try row.decode(amount, as: Int64?.self), let code = try row.decode(currency, as: String?.self) else { return nil }
                return Price(milliunits: milliunits, currency: code)
            }
            let transaction = JournalTransaction(
                transactionId: try row.decode("transaction_id"), originalTransactionId: try row.decode("original_transaction_id"),
                webOrderLineItemId: try row.decode("web_order_line_item_id"),
                productType: signedType ?? catalogType ?? (expires != nil ? .autoRenewable : .nonConsumable),
                purchaseDate: try row.decode("purchase_date"), originalPurchaseDate: try row.decode("original_purchase_date"),
                cancellationDate: try row.decode("cancellation_date"),
                cancellationReason: try row.decode("cancellation_reason"), isUpgraded: try row.decode("is_upgraded"),
                isTrialPeriod: try row.decode("is_trial_period"), ownershipType: try row.decode("ownership_type"),
                offerDiscountType: try row.decode("offer_discount_type"), signedPrice: try price("price_milliunits", "currency"),
                catalogPrice: try price("catalog_price", "catalog_currency"), revocationType: try row.decode("revocation_type"),
                revocationPercentage: try row.decode("revocation_percentage"), appleAsOf: try row.decode("apple_as_of"))
            rows[transaction.transactionId] = transaction
        }
        return rows
    }

    static func record(_ row: PostgresRow) throws -> JournalRecord {
        guard let kind = FinanceEvent.Kind(rawValue: try row.decode("event")),
              let source = FinanceEvent.AmountSource(rawValue: try row.decode("amount_source")) else {
            throw PostgresError(code: .decoding, phase: .decode, message: "unknown finance event or amount source", column: "event")
        }
        return JournalRecord(
            kind: kind, adjusts: try row.decode("adjusts", as: String?.self).flatMap(FinanceEvent.Kind.init(rawValue:)),
            transactionId: try row.decode("transaction_id"), time: try row.decode("event_time"), amount: try row.decode("amount_milliunits"),
            currency: try row.decode("currency"), price: try row.decode("price_milliunits"), amountSource: source)
    }
}

extension ReconciliationStore {
    /// `FinanceJournal.drainBacklog` on this session.
    public func drainJournalBacklog() async throws -> Int {
        try await FinanceJournal.drainBacklog(connection: connection)
    }
}
