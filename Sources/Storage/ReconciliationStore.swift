import AppStoreModels
import CivilCalendar
import Foundation
import Postgres
import Reconciliation

/// The SQL of a reconciliation run: reading due accounts in keyset pages, writing a batch of
/// results in one transaction, and applying planned corrections. Every value is bound.
///
/// A store wraps one connection and serves one task at a time: the run uses one store to read
/// and another to write, so pages are read while batches are written.
public struct ReconciliationStore: Sendable {
    /// Storage's alone: every statement and transaction on it is written here, never by a caller.
    let connection: PostgresConnection

    public init(connection: PostgresConnection) {
        self.connection = connection
    }

    /// Ends the session; later calls fail with `connectionClosed`.
    public func close() async {
        await connection.close()
    }

    // MARK: - Reading

    /// The product catalog (`iap.products`), by product id.
    public func catalog() async throws -> [String: Product] {
        var catalog: [String: Product] = [:]
        for row in try await connection.query("SELECT product_id, type, duration, entitlement, price, currency, passes_stack FROM iap.products") {
            guard let type = ProductType(rawValue: try row.decode("type", as: String.self)) else { continue }
            let duration = try row.decode("duration", as: PostgresInterval?.self).map {
                CalendarDuration(months: Int($0.months), days: Int($0.days), seconds: Double($0.microseconds) / 1_000_000)
            }
            let product = Product(
                productId: try row.decode("product_id"), type: type, duration: duration,
                entitlement: try row.decode("entitlement"), price: try row.decode("price"), currency: try row.decode("currency"),
                passesStack: try row.decode("passes_stack"))
            catalog[product.productId] = product
        }
        return catalog
    }

    /// The next page of selected accounts after `after`, in account order (keyset pagination:
    /// bounded memory and no account twice, however large the table).
    public func accounts(after: String, limit: Int, selection: AccountSelection, now: Date) async throws -> [String] {
        let shardCount = selection.shard.map { Int($0.count) }
        let shardIndex = selection.shard.map { Int($0.index) }
        let rows: [PostgresRow]
        switch selection.kind {
        case .due(let staleAfter):
            let staleBefore = now.adding(.zero - staleAfter)
            rows = try await connection.query("""
                SELECT account_id FROM iap.app_receipts
                WHERE account_id > \(after)
                  AND (reverify_requested_at IS NOT NULL
                       OR ((last_verified_at IS NULL OR last_verified_at < \(staleBefore))
                           AND (next_attempt_at IS NULL OR next_attempt_at <= \(now))))
                  AND iap.in_shard(account_id, \(shardIndex), \(shardCount))
                GROUP BY account_id ORDER BY account_id LIMIT \(limit)
                """)
        case .scheduled(let runId):
            // The cursor is a position in the plan, not an account id.
            rows = try await connection.query("""
                SELECT account_id FROM iap.run_schedule
                WHERE run_id = \(runId) AND position > \(Int(after) ?? 0)
                ORDER BY position LIMIT \(limit)
                """)
        case .reverifyRequested:
            rows = try await connection.query("""
                SELECT account_id FROM iap.app_receipts
                WHERE account_id > \(after) AND reverify_requested_at IS NOT NULL
                  AND iap.in_shard(account_id, \(shardIndex), \(shardCount))
                GROUP BY account_id ORDER BY account_id LIMIT \(limit)
                """)
        case .backfill(let accounts, let receiptIds, let since, let until, let products, _):
            rows = try await connection.query("""
                SELECT account_id FROM iap.app_receipts
                WHERE account_id > \(after)
                  AND (cardinality(\(accounts)::text[]) = 0 OR account_id = ANY(\(accounts)::text[]))
                  AND (cardinality(\(receiptIds.map(String.init))::bigint[]) = 0 OR id = ANY(\(receiptIds.map(String.init))::bigint[]))
                  AND (\(since)::timestamptz IS NULL OR updated_at >= \(since))
                  AND (\(until)::timestamptz IS NULL OR updated_at < \(until))
                  AND (cardinality(\(products)::text[]) = 0 OR account_id IN (
                        SELECT account_id FROM iap.entitlements WHERE product_id = ANY(\(products)::text[])
                        UNION SELECT account_id FROM iap.transactions WHERE product_id = ANY(\(products)::text[])))
                  AND iap.in_shard(account_id, \(shardIndex), \(shardCount))
                GROUP BY account_id ORDER BY account_id LIMIT \(limit)
                """)
        }
        return try rows.map { try $0.decode("account_id") }
    }

    /// A keyset page of selected accounts, each with every receipt and stored entitlement.
    public struct AccountPage: Sendable {
        public var accounts: [AccountWork]
        /// Where the next page starts: the last account, or the last position of a plan.
        public var cursor: String?
    }

    /// The next page after `after`, read from one snapshot: a purchase the app server commits
    /// meanwhile (a receipt and its entitlement) is seen whole or not at all, never as an
    /// entitlement without the receipt that supports it, which would plan a revoke.
    ///
    /// With `markingFor`, the page's accounts that no earlier run left unfinished are then marked
    /// as started by that run (`markStarted`), before any of them is worked on.
    public func page(after: String, limit: Int, selection: AccountSelection, now: Date, maximumReceiptBytes: Int = 8 << 20,
                     markingFor runId: Int64? = nil) async throws -> AccountPage {
        let page = try await connection.withTransaction(.snapshotReadOnly) { _ in
            let ids = try await self.accounts(after: after, limit: limit, selection: selection, now: now)
            let receipts = try await receipts(of: ids, maximumReceiptBytes: maximumReceiptBytes)
            let stored = try await entitlements(of: ids)
            let unfinished = try await unfinished(of: ids)
            return AccountPage(
                accounts: ids.map { AccountWork(accountId: $0, receipts: receipts[$0] ?? [], stored: stored[$0] ?? [], unfinished: unfinished[$0]) },
                cursor: Self.cursor(after: after, page: ids, selection: selection))
        }
        if let runId {
            try await markStarted(page.accounts.filter { $0.unfinished == nil }.map(\.accountId), runId: runId)
        }
        return page
    }

    /// Where the page after `page` starts: its last account, or for a plan the position of its
    /// last account (positions are 1, 2, 3... in the plan's order); nil after an empty page.
    static func cursor(after: String, page: [String], selection: AccountSelection) -> String? {
        guard let last = page.last else { return nil }
        if case .scheduled = selection.kind { return String((Int(after) ?? 0) + page.count) }
        return last
    }

    /// How many accounts the selection holds now (for a progress display).
    public func countAccounts(selection: AccountSelection, now: Date) async throws -> Int {
        var total = 0
        var after = ""
        // Counted by the same keyset pages the run reads, so the two always agree.
        while true {
            let page = try await accounts(after: after, limit: 10_000, selection: selection, now: now)
            total += page.count
            guard page.count == 10_000, let next = Self.cursor(after: after, page: page, selection: selection) else { return total }
            after = next
        }
    }

    /// Every receipt of these accounts (an account's entitlements come from all of them). A blob
    /// larger than `maximumReceiptBytes` is not read at all: PostgreSQL says its size, and the
    /// run refuses it without holding it in memory.
    public func receipts(of accounts: [String], maximumReceiptBytes: Int = 8 << 20) async throws -> [String: [StoredReceipt]] {
        let rows = try await connection.query("""
            SELECT id, account_id, bundle_id, environment, attempts, malformed_runs, xmin::text AS row_version, ledger_digest, created_at,
                   CASE WHEN octet_length(latest_receipt) > \(maximumReceiptBytes) THEN '' ELSE latest_receipt END AS latest_receipt,
                   CASE WHEN octet_length(latest_receipt) > \(maximumReceiptBytes) THEN octet_length(latest_receipt) END AS oversize_bytes,
                   array_to_string(COALESCE(ledger_original_transaction_ids, '{}') || COALESCE(receipt_original_transaction_ids, '{}'), ' ')
                       AS known_originals,
                   receipt_decoded_digest, receipt_bundle_id, array_to_string(receipt_original_transaction_ids, ' ') AS receipt_originals
            FROM iap.app_receipts WHERE account_id = ANY(\(accounts)) ORDER BY account_id, id
            """)
        var result: [String: [StoredReceipt]] = [:]
        for row in rows {
            var receipt = StoredReceipt(
                id: try row.decode("id"), accountId: try row.decode("account_id"), bundleId: try row.decode("bundle_id"),
                latestReceipt: try row.decode("latest_receipt"),
                environment: AppleEnvironment(appleName: try row.decode("environment", as: String?.self)),
                attempts: try row.decode("attempts"), rowVersion: try row.decode("row_version"),
                ledgerDigest: try row.decode("ledger_digest"), oversizeBytes: try row.decode("oversize_bytes"),
                knownOriginalTransactionIds: (try row.decode("known_originals", as: String?.self) ?? "").split(separator: " ").map(String.init))
            receipt.malformedRuns = try row.decode("malformed_runs")
            receipt.storedAt = try row.decode("created_at")
            if let digest: Int64 = try row.decode("receipt_decoded_digest"), digest == receipt.blobDigest {
                receipt.storedLocalDecode = ReceiptIdentifiers(
                    bundleId: try row.decode("receipt_bundle_id"),
                    originalTransactionIds: (try row.decode("receipt_originals", as: String?.self) ?? "").split(separator: " ").map(String.init))
            }
            result[receipt.accountId, default: []].append(receipt)
        }
        return result
    }

    /// The stored entitlements of these accounts.
    public func entitlements(of accounts: [String]) async throws -> [String: [Entitlement]] {
        let rows = try await connection.query("SELECT * FROM iap.entitlements WHERE account_id = ANY(\(accounts))")
        var result: [String: [Entitlement]] = [:]
        for row in rows {
            let entitlement = try Entitlement(row: row)
            result[entitlement.accountId, default: []].append(entitlement)
        }
        return result
    }
}

extension ReconciliationStore {
    /// For the nightly summary (docs/reports.md): the refund questions of the last day by
    /// outcome, and when the oldest one still waiting for its answer was asked.
    public func consumptionAnswers(since: Date, now: Date) async throws -> (outcomes: [String: Int], oldestOpen: Date?) {
        let store = ConsumptionStore(connection: connection)
        return (try await store.outcomes(since: since), try await store.oldestOpenRequest(now: now))
    }
}
