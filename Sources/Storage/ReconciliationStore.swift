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
    public let connection: PostgresConnection

    public init(connection: PostgresConnection) {
        self.connection = connection
    }

    // MARK: - Reading

    /// The product catalog (`iap.products`), by product id.
    public func catalog() async throws -> [String: Product] {
        var catalog: [String: Product] = [:]
        for row in try await connection.query("SELECT product_id, type, duration, entitlement, price, currency FROM iap.products") {
            guard let type = ProductType(rawValue: try row.decode("type", as: String.self)) else { continue }
            let duration = try row.decode("duration", as: PostgresInterval?.self).map {
                CalendarDuration(months: Int($0.months), days: Int($0.days), seconds: Double($0.microseconds) / 1_000_000)
            }
            let product = Product(
                productId: try row.decode("product_id"), type: type, duration: duration,
                entitlement: try row.decode("entitlement"), price: try row.decode("price"), currency: try row.decode("currency"))
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

    /// A keyset page of selected accounts with every receipt and stored entitlement of each.
    public struct AccountPage: Sendable {
        public var accounts: [String]
        public var receipts: [String: [StoredReceipt]]
        public var stored: [String: [Entitlement]]
        /// The page's accounts that an earlier run started and never finished, or set aside.
        public var unfinished: [String: UnfinishedAccount]
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
            let accounts = try await self.accounts(after: after, limit: limit, selection: selection, now: now)
            return AccountPage(
                accounts: accounts, receipts: try await receipts(of: accounts, maximumReceiptBytes: maximumReceiptBytes),
                stored: try await entitlements(of: accounts), unfinished: try await unfinished(of: accounts),
                cursor: Self.cursor(after: after, page: accounts, selection: selection))
        }
        if let runId {
            try await markStarted(page.accounts.filter { page.unfinished[$0] == nil }, runId: runId)
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
            SELECT id, account_id, bundle_id, environment, attempts, xmin::text AS row_version, ledger_digest,
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

    // MARK: - Writing a batch

    /// Writes one batch in the caller's transaction: receipt statuses, the ledger and the planned
    /// corrections. In a dry run only the planned corrections are written.
    /// `verifiedAccounts` are the batch's accounts whose receipts all verified: their fresh plan
    /// replaces any older plan this run took over.
    public func writeBatch(
        runId: Int64, startedAt: Date, receipts: [ReceiptUpdate], ledger: [LedgerEntry], corrections: [Correction],
        verifiedAccounts: [String], renewals: RenewalReplacement = RenewalReplacement(), finishedAccounts: [String] = [], isDryRun: Bool
    ) async throws {
        // The accounts' results commit here: they were started and finished (a dry run's too).
        try await clearStarted(finishedAccounts)
        if !isDryRun {
            try await updateReceipts(runId: runId, startedAt: startedAt, receipts)
            try await upsertLedger(ledger)
            try await replaceRenewals(renewals)
            if !verifiedAccounts.isEmpty {
                try await connection.execute("""
                    UPDATE iap.corrections SET status = 'superseded'
                    WHERE run_id = \(runId) AND status = 'planned' AND account_id = ANY(\(verifiedAccounts))
                    """)
            }
        }
        try await insertPlannedCorrections(runId: runId, corrections)
    }

    func updateReceipts(runId: Int64, startedAt: Date, _ updates: [ReceiptUpdate]) async throws {
        guard !updates.isEmpty else { return }
        try await connection.execute("""
            UPDATE iap.app_receipts AS r SET
                -- What the run learned describes the blob it read: a row the app server wrote meanwhile
                -- (xmin changed: a new blob) keeps its own state and stays due.
                environment      = CASE WHEN r.xmin::text = u.row_version THEN COALESCE(u.environment, r.environment)
                                        ELSE r.environment END,
                last_verified_at = CASE WHEN r.xmin::text = u.row_version THEN COALESCE(u.verified_at, r.last_verified_at)
                                        ELSE r.last_verified_at END,
                last_status      = CASE WHEN r.xmin::text = u.row_version THEN u.status ELSE r.last_status END,
                next_attempt_at  = CASE WHEN r.xmin::text = u.row_version THEN u.next_attempt_at ELSE r.next_attempt_at END,
                attempts         = CASE WHEN r.xmin::text = u.row_version THEN u.attempts ELSE r.attempts END,
                last_outcome     = CASE WHEN r.xmin::text = u.row_version THEN u.outcome ELSE r.last_outcome END,
                last_failure_reason    = CASE WHEN r.xmin::text = u.row_version THEN u.failure_reason ELSE r.last_failure_reason END,
                last_failure_attempts  = CASE WHEN r.xmin::text = u.row_version THEN u.failure_attempts ELSE r.last_failure_attempts END,
                last_failure_endpoints = CASE WHEN r.xmin::text = u.row_version THEN u.failure_endpoints ELSE r.last_failure_endpoints END,
                last_run_id      = \(runId),
                latest_receipt   = CASE WHEN r.xmin::text = u.row_version AND u.latest_receipt IS NOT NULL
                                        THEN u.latest_receipt ELSE r.latest_receipt END,
                -- A decode with its digest describes that blob exactly (a missing bundle id included).
                receipt_bundle_id = CASE WHEN r.xmin::text <> u.row_version THEN r.receipt_bundle_id
                                         WHEN u.decoded_digest IS NOT NULL THEN u.local_bundle_id
                                         ELSE COALESCE(u.local_bundle_id, r.receipt_bundle_id) END,
                receipt_original_transaction_ids = CASE WHEN r.xmin::text <> u.row_version THEN r.receipt_original_transaction_ids
                                                        WHEN u.decoded_digest IS NOT NULL THEN u.local_originals::text[]
                                                        ELSE COALESCE(u.local_originals::text[], r.receipt_original_transaction_ids) END,
                receipt_decoded_digest = CASE WHEN r.xmin::text = u.row_version THEN u.decoded_digest
                                              ELSE r.receipt_decoded_digest END,
                ledger_original_transaction_ids = CASE WHEN r.xmin::text = u.row_version
                                                       THEN COALESCE(u.ledger_originals::text[], r.ledger_original_transaction_ids)
                                                       ELSE r.ledger_original_transaction_ids END,
                -- A blob the app server replaced meanwhile was not what this digest came from.
                ledger_digest    = CASE WHEN r.xmin::text = u.row_version THEN u.ledger_digest END,
                -- A notification's request is done once the receipt verified (unless it came after the run began).
                reverify_requested_at = CASE WHEN u.verified_at IS NOT NULL AND r.reverify_requested_at <= \(startedAt)
                                             THEN NULL ELSE r.reverify_requested_at END
            FROM unnest(\(PostgresArray(updates.map(\.id)))::bigint[],
                        \(PostgresArray(updates.map(\.rowVersion)))::text[],
                        \(PostgresArray(updates.map { $0.environment?.rawValue }))::text[],
                        \(PostgresArray(updates.map(\.verifiedAt)))::timestamptz[],
                        \(PostgresArray(updates.map(\.status)))::integer[],
                        \(PostgresArray(updates.map(\.nextAttemptAt)))::timestamptz[],
                        \(PostgresArray(updates.map(\.attempts)))::integer[],
                        \(PostgresArray(updates.map(\.outcome.rawValue)))::text[],
                        \(PostgresArray(updates.map(\.latestReceipt)))::text[],
                        \(PostgresArray(updates.map(\.localBundleId)))::text[],
                        \(PostgresArray(updates.map { $0.localOriginalTransactionIds.map { PostgresTextArray($0).postgresText } }))::text[],
                        \(PostgresArray(updates.map(\.ledgerDigest)))::bigint[],
                        \(PostgresArray(updates.map { $0.ledgerOriginalTransactionIds.map { PostgresTextArray($0).postgresText } }))::text[],
                        \(PostgresArray(updates.map(\.localDecodeDigest)))::bigint[],
                        \(PostgresArray(updates.map { $0.failure?.reason }))::text[],
                        \(PostgresArray(updates.map { $0.failure?.attempts }))::integer[],
                        \(PostgresArray(updates.map { $0.failure?.endpoints }))::text[])
                AS u(id, row_version, environment, verified_at, status, next_attempt_at, attempts, outcome, latest_receipt,
                     local_bundle_id, local_originals, ledger_digest, ledger_originals, decoded_digest,
                     failure_reason, failure_attempts, failure_endpoints)
            WHERE r.id = u.id
            """)
    }

    /// The renewal state of these accounts becomes `entries`: Apple's latest word on each chain.
    public func replaceRenewals(_ replacement: RenewalReplacement) async throws {
        guard !replacement.accounts.isEmpty else { return }
        try await connection.execute("DELETE FROM iap.renewals WHERE account_id = ANY(\(replacement.accounts))")
        let entries = replacement.entries
        guard !entries.isEmpty else { return }
        try await connection.execute("""
            INSERT INTO iap.renewals (account_id, original_transaction_id, product_id, auto_renew_product_id, auto_renew_status,
                                      expiration_intent, grace_period_expires_date, is_in_billing_retry_period, environment)
            SELECT * FROM unnest(
                \(PostgresArray(entries.map(\.accountId)))::text[],
                \(PostgresArray(entries.map { $0.info.originalTransactionId ?? "" }))::text[],
                \(PostgresArray(entries.map { $0.info.productId ?? "" }))::text[],
                \(PostgresArray(entries.map(\.info.autoRenewProductId)))::text[],
                \(PostgresArray(entries.map(\.info.autoRenewStatus)))::boolean[],
                \(PostgresArray(entries.map(\.info.expirationIntent)))::integer[],
                \(PostgresArray(entries.map(\.info.gracePeriodExpiresDate)))::timestamptz[],
                \(PostgresArray(entries.map(\.info.isInBillingRetryPeriod)))::boolean[],
                \(PostgresArray(entries.map(\.environment.rawValue)))::text[])
            ON CONFLICT DO NOTHING
            """)
    }

    /// Upserts transactions; a recorded cancellation is never cleared by an answer that omits it,
    /// and an unchanged transaction is not rewritten.
    public func upsertLedger(_ entries: [LedgerEntry]) async throws {
        var seen = Set<String>()
        let unique = entries.filter { seen.insert($0.transaction.transactionId).inserted }
        guard !unique.isEmpty else { return }
        let transactions = unique.map(\.transaction)
        try await connection.execute("""
            INSERT INTO iap.transactions AS t (
                transaction_id, account_id, original_transaction_id, product_id, purchase_date, original_purchase_date,
                expires_date, cancellation_date, cancellation_reason, is_upgraded, is_trial_period,
                is_in_intro_offer_period, quantity, web_order_line_item_id, subscription_group_identifier,
                offer_code_ref_name, promotional_offer_id, ownership_type, environment, price_milliunits, currency, source)
            SELECT * FROM unnest(
                \(PostgresArray(transactions.map(\.transactionId)))::text[],
                \(PostgresArray(unique.map(\.accountId)))::text[],
                \(PostgresArray(transactions.map(\.originalTransactionId)))::text[],
                \(PostgresArray(transactions.map(\.productId)))::text[],
                \(PostgresArray(transactions.map(\.purchaseDate)))::timestamptz[],
                \(PostgresArray(transactions.map(\.originalPurchaseDate)))::timestamptz[],
                \(PostgresArray(transactions.map(\.expiresDate)))::timestamptz[],
                \(PostgresArray(transactions.map(\.cancellationDate)))::timestamptz[],
                \(PostgresArray(transactions.map(\.cancellationReason)))::integer[],
                \(PostgresArray(transactions.map(\.isUpgraded)))::boolean[],
                \(PostgresArray(transactions.map(\.isTrialPeriod)))::boolean[],
                \(PostgresArray(transactions.map(\.isInIntroOfferPeriod)))::boolean[],
                \(PostgresArray(transactions.map(\.quantity)))::integer[],
                \(PostgresArray(transactions.map(\.webOrderLineItemId)))::text[],
                \(PostgresArray(transactions.map(\.subscriptionGroupIdentifier)))::text[],
                \(PostgresArray(transactions.map(\.offerCodeRefName)))::text[],
                \(PostgresArray(transactions.map(\.promotionalOfferId)))::text[],
                \(PostgresArray(transactions.map(\.inAppOwnershipType)))::text[],
                \(PostgresArray(unique.map(\.environment.rawValue)))::text[],
                \(PostgresArray(unique.map(\.price?.milliunits)))::bigint[],
                \(PostgresArray(unique.map(\.price?.currency)))::text[],
                \(PostgresArray(unique.map(\.source.rawValue)))::text[])
            ON CONFLICT (transaction_id) DO UPDATE SET
                product_id                    = EXCLUDED.product_id,
                original_transaction_id       = COALESCE(EXCLUDED.original_transaction_id, t.original_transaction_id),
                purchase_date                 = COALESCE(EXCLUDED.purchase_date, t.purchase_date),
                original_purchase_date        = COALESCE(EXCLUDED.original_purchase_date, t.original_purchase_date),
                expires_date                  = COALESCE(EXCLUDED.expires_date, t.expires_date),
                cancellation_date             = COALESCE(EXCLUDED.cancellation_date, t.cancellation_date),
                cancellation_reason           = COALESCE(EXCLUDED.cancellation_reason, t.cancellation_reason),
                is_upgraded                   = COALESCE(EXCLUDED.is_upgraded, t.is_upgraded),
                is_trial_period               = COALESCE(EXCLUDED.is_trial_period, t.is_trial_period),
                is_in_intro_offer_period      = COALESCE(EXCLUDED.is_in_intro_offer_period, t.is_in_intro_offer_period),
                quantity                      = COALESCE(EXCLUDED.quantity, t.quantity),
                web_order_line_item_id        = COALESCE(EXCLUDED.web_order_line_item_id, t.web_order_line_item_id),
                subscription_group_identifier = COALESCE(EXCLUDED.subscription_group_identifier, t.subscription_group_identifier),
                offer_code_ref_name           = COALESCE(EXCLUDED.offer_code_ref_name, t.offer_code_ref_name),
                promotional_offer_id          = COALESCE(EXCLUDED.promotional_offer_id, t.promotional_offer_id),
                ownership_type                = COALESCE(EXCLUDED.ownership_type, t.ownership_type),
                environment                   = COALESCE(EXCLUDED.environment, t.environment),
                price_milliunits              = COALESCE(EXCLUDED.price_milliunits, t.price_milliunits),
                currency                      = COALESCE(EXCLUDED.currency, t.currency),
                source                        = EXCLUDED.source,
                updated_at                    = now()
            WHERE (t.product_id, t.original_transaction_id, t.purchase_date, t.original_purchase_date, t.expires_date,
                   t.cancellation_date, t.cancellation_reason, t.is_upgraded, t.is_trial_period,
                   t.is_in_intro_offer_period, t.quantity, t.web_order_line_item_id, t.subscription_group_identifier,
                   t.offer_code_ref_name, t.promotional_offer_id, t.ownership_type, t.environment,
                   t.price_milliunits, t.currency)
               IS DISTINCT FROM
                  (EXCLUDED.product_id, COALESCE(EXCLUDED.original_transaction_id, t.original_transaction_id),
                   COALESCE(EXCLUDED.purchase_date, t.purchase_date),
                   COALESCE(EXCLUDED.original_purchase_date, t.original_purchase_date),
                   COALESCE(EXCLUDED.expires_date, t.expires_date),
                   COALESCE(EXCLUDED.cancellation_date, t.cancellation_date),
                   COALESCE(EXCLUDED.cancellation_reason, t.cancellation_reason),
                   COALESCE(EXCLUDED.is_upgraded, t.is_upgraded), COALESCE(EXCLUDED.is_trial_period, t.is_trial_period),
                   COALESCE(EXCLUDED.is_in_intro_offer_period, t.is_in_intro_offer_period),
                   COALESCE(EXCLUDED.quantity, t.quantity),
                   COALESCE(EXCLUDED.web_order_line_item_id, t.web_order_line_item_id),
                   COALESCE(EXCLUDED.subscription_group_identifier, t.subscription_group_identifier),
                   COALESCE(EXCLUDED.offer_code_ref_name, t.offer_code_ref_name),
                   COALESCE(EXCLUDED.promotional_offer_id, t.promotional_offer_id),
                   COALESCE(EXCLUDED.ownership_type, t.ownership_type), COALESCE(EXCLUDED.environment, t.environment),
                   COALESCE(EXCLUDED.price_milliunits, t.price_milliunits), COALESCE(EXCLUDED.currency, t.currency))
            """)
    }

    /// Clears a transaction's refund: only when Apple's signed data says it was reversed (a V2
    /// REFUND_REVERSED whose signed transaction has no revocationDate). Other writes never clear one.
    public func clearRevocation(transactionId: String, source: LedgerSource) async throws {
        try await connection.execute("""
            UPDATE iap.transactions SET cancellation_date = NULL, cancellation_reason = NULL, source = \(source.rawValue), updated_at = now()
            WHERE transaction_id = \(transactionId) AND (cancellation_date IS NOT NULL OR cancellation_reason IS NOT NULL)
            """)
    }

    func insertPlannedCorrections(runId: Int64, _ corrections: [Correction]) async throws {
        guard !corrections.isEmpty else { return }
        try await connection.execute("""
            INSERT INTO iap.corrections (run_id, account_id, product_id, kind, reason, before, after, status)
            SELECT \(runId), * , 'planned' FROM unnest(
                \(PostgresArray(corrections.map(\.accountId)))::text[],
                \(PostgresArray(corrections.map(\.productId)))::text[],
                \(PostgresArray(corrections.map(\.kind.rawValue)))::text[],
                \(PostgresArray(corrections.map(\.reason)))::text[],
                \(PostgresArray(try corrections.map { try EntitlementJSON.encode($0.before) }))::jsonb[],
                \(PostgresArray(try corrections.map { try EntitlementJSON.encode($0.after) }))::jsonb[])
            ON CONFLICT (run_id, account_id, product_id) WHERE status = 'planned' DO NOTHING
            """)
    }

    // MARK: - Applying planned corrections

    /// What applying one batch did.
    public struct ApplyResult: Sendable {
        public var applied = 0
        public var superseded = 0
        /// The id to continue after; nil when nothing was left.
        public var lastId: Int64?
    }

    /// Applies up to `limit` planned corrections of `runId` after `afterId`, in one transaction:
    /// each entitlement change lands together with its correction's `applied_at`. A correction
    /// whose entitlement changed since it was planned (its `before` no longer matches the row)
    /// is marked `superseded` instead: the app server's newer write wins, and the next run decides.
    public func applyPlanned(runId: Int64, afterId: Int64, limit: Int, now: Date) async throws -> ApplyResult {
        try await connection.withTransaction { connection in
            // `before` comes back as the entitlement row it describes (PostgreSQL reads the JSON), so
            // comparing it with the stored row needs no JSON decoding here.
            let planned = try await connection.query("""
                SELECT c.id AS correction_id, c.account_id AS correction_account_id, c.product_id AS correction_product_id,
                       c.before IS NOT NULL AS has_before, c.after::text AS after, b.*
                FROM iap.corrections c LEFT JOIN LATERAL jsonb_populate_record(NULL::iap.entitlements, c.before) AS b ON true
                WHERE c.run_id = \(runId) AND c.status = 'planned' AND c.id > \(afterId)
                ORDER BY c.id LIMIT \(limit) FOR UPDATE OF c
                """)
            var result = ApplyResult()
            guard let last = planned.last else { return result }
            result.lastId = try last.decode("correction_id")
            let accounts = Array(Set(try planned.map { try $0.decode("correction_account_id", as: String.self) }))
            let current = try await connection.query("""
                SELECT * FROM iap.entitlements WHERE account_id = ANY(\(accounts)) FOR UPDATE
                """)
            var stored: [String: Entitlement] = [:]
            for row in current {
                let entitlement = try Entitlement(row: row)
                stored[entitlement.accountId + "\u{0}" + entitlement.productId] = entitlement
            }
            // Corrections planned against an existing row update it (locked above); those planned
            // where no row existed insert one only if still absent: a row the app server inserted
            // meanwhile cannot be locked in advance, and must not be overwritten.
            var updates: [(id: Int64, after: String)] = []
            var inserts: [(id: Int64, key: String, after: String)] = []
            var superseded: [Int64] = []
            var appliedHere: [String: String] = [:]
            for row in planned {
                let id: Int64 = try row.decode("correction_id")
                let key = try row.decode("correction_account_id", as: String.self) + "\u{0}"
                    + row.decode("correction_product_id", as: String.self)
                let before = try row.decode("has_before", as: Bool.self) ? try Entitlement(row: row) : nil
                // A correction applied earlier in this batch changed the row it compares with.
                let current = try appliedHere[key].map { try EntitlementJSON.decode($0) } ?? stored[key]
                if current == before {
                    let after: String = try row.decode("after")
                    if current == nil { inserts.append((id, key, after)) } else { updates.append((id, after)) }
                    appliedHere[key] = after
                } else {
                    superseded.append(id)
                }
            }
            var applied: [Int64] = []
            if !inserts.isEmpty {
                let inserted = Set(try await connection.query("""
                    INSERT INTO iap.entitlements AS e (
                        account_id, product_id, original_transaction_id, latest_transaction_id, state, entitled,
                        expires_at, grace_period_expires_at, auto_renew, auto_renew_product_id, environment,
                        ownership_type, refunded_at, updated_at)
                    SELECT r.account_id, r.product_id, r.original_transaction_id, r.latest_transaction_id, r.state,
                           r.entitled, r.expires_at, r.grace_period_expires_at, r.auto_renew, r.auto_renew_product_id,
                           r.environment, r.ownership_type, r.refunded_at, \(now)
                    FROM unnest(\(PostgresArray(inserts.map(\.after)))::jsonb[]) AS a(after),
                         jsonb_populate_record(NULL::iap.entitlements, a.after) AS r
                    ON CONFLICT (account_id, product_id) DO NOTHING
                    RETURNING e.account_id, e.product_id
                    """).map { try $0.decode("account_id", as: String.self) + "\u{0}" + $0.decode("product_id", as: String.self) })
                for insert in inserts {
                    if inserted.contains(insert.key) { applied.append(insert.id) } else { superseded.append(insert.id) }
                }
            }
            if !updates.isEmpty {
                try await connection.execute("""
                    UPDATE iap.entitlements AS e SET
                        original_transaction_id = r.original_transaction_id,
                        latest_transaction_id   = r.latest_transaction_id,
                        state                   = r.state,
                        entitled                = r.entitled,
                        expires_at              = r.expires_at,
                        grace_period_expires_at = r.grace_period_expires_at,
                        auto_renew              = r.auto_renew,
                        auto_renew_product_id   = r.auto_renew_product_id,
                        environment             = r.environment,
                        ownership_type          = r.ownership_type,
                        refunded_at             = r.refunded_at,
                        updated_at              = \(now)
                    FROM unnest(\(PostgresArray(updates.map(\.after)))::jsonb[]) AS a(after),
                         jsonb_populate_record(NULL::iap.entitlements, a.after) AS r
                    WHERE e.account_id = r.account_id AND e.product_id = r.product_id
                    """)
                applied += updates.map(\.id)
            }
            if !applied.isEmpty {
                try await connection.execute("""
                    UPDATE iap.corrections SET status = 'applied', applied_at = \(now)
                    WHERE id = ANY(\(PostgresArray(applied))::bigint[])
                    """)
            }
            if !superseded.isEmpty {
                try await connection.execute("""
                    UPDATE iap.corrections SET status = 'superseded'
                    WHERE id = ANY(\(PostgresArray(superseded))::bigint[])
                    """)
            }
            result.applied = applied.count
            result.superseded = superseded.count
            return result
        }
    }
}
