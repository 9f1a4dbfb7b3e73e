import AppStoreModels
import CivilCalendar
import Foundation
import Postgres
import Reconciliation

extension ReconciliationStore {
    // MARK: - Writing a batch

    /// Commits one batch whole, in one transaction: receipt statuses, the ledger, Apple's renewal
    /// state, the planned corrections, the marks of its accounts cleared, and the run's counts
    /// with the batch counted on the run's row. False when this batch was committed already (its
    /// COMMIT landed but the acknowledgement was lost): the retry writes nothing a second time.
    @discardableResult
    public func commit(_ batch: BatchWrite) async throws -> Bool {
        try await connection.withTransaction { _ in
            guard try await claimBatch(runId: batch.run.runId, sequence: batch.sequence) else { return false }
            try await writeBatch(
                runId: batch.run.runId, startedAt: batch.startedAt, receipts: batch.receipts, ledger: batch.ledger,
                corrections: batch.corrections, verifiedAccounts: batch.verifiedAccounts, renewals: batch.renewals,
                finishedAccounts: batch.finishedAccounts, isDryRun: batch.isDryRun)
            try await updateRun(batch.run)
            return true
        }
    }

    /// Writes one batch in the caller's transaction (`commit`): receipt statuses, the ledger and
    /// the planned corrections. In a dry run only the planned corrections are written.
    /// `verifiedAccounts` are the batch's accounts whose receipts all verified: their fresh plan
    /// replaces any older plan this run took over (the others' are retired unapplied when planning
    /// ends: `retireTakenOverCorrections`).
    func writeBatch(
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
                malformed_runs   = CASE WHEN r.xmin::text = u.row_version THEN u.malformed_runs ELSE r.malformed_runs END,
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
                        \(PostgresArray(updates.map { $0.failure?.endpoints }))::text[],
                        \(PostgresArray(updates.map(\.malformedRuns)))::integer[])
                AS u(id, row_version, environment, verified_at, status, next_attempt_at, attempts, outcome, latest_receipt,
                     local_bundle_id, local_originals, ledger_digest, ledger_originals, decoded_digest,
                     failure_reason, failure_attempts, failure_endpoints, malformed_runs)
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

    /// Upserts transactions (docs/database.md, "The ledger"): what Apple says fills in and wins,
    /// what it leaves out is kept; a cancellation follows Apple's latest word: an older signed
    /// snapshot than the row's changes none, only a current word (a live answer, a newer signed
    /// snapshot) clears one. A transaction not changed, by an answer no later than its word, is not
    /// rewritten. The money events the new and changed rows reveal go
    /// into the finance journal in the same transaction (`FinanceJournal.record`).
    public func upsertLedger(_ entries: [LedgerEntry]) async throws {
        var seen = Set<String>()
        let unique = entries.filter { seen.insert($0.transaction.transactionId).inserted }
        guard !unique.isEmpty else { return }
        let transactions = unique.map(\.transaction)
        let signed = unique.map(\.signed)
        // Only a row new or whose money terms changed is looked at again by the journal: most rows
        // a night rewrites changed otherwise (Apple's word is later, an expiry moved).
        let rows = try await connection.query("""
            WITH written AS (
            INSERT INTO iap.transactions AS t (
                transaction_id, account_id, original_transaction_id, product_id, purchase_date, original_purchase_date,
                expires_date, cancellation_date, cancellation_reason, is_upgraded, is_trial_period,
                is_in_intro_offer_period, quantity, web_order_line_item_id, subscription_group_identifier,
                offer_code_ref_name, promotional_offer_id, ownership_type, environment, price_milliunits, currency, source,
                revocation_type, revocation_percentage, offer_discount_type, offer_period, storefront, app_transaction_id,
                signed_product_type, apple_as_of, terms_changed)
            -- A new row is new terms: the journal looks at it (terms_changed true).
            SELECT *, true FROM unnest(
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
                \(PostgresArray(signed.map { $0?.price?.milliunits }))::bigint[],
                \(PostgresArray(signed.map { $0?.price?.currency }))::text[],
                \(PostgresArray(unique.map(\.source.rawValue)))::text[],
                \(PostgresArray(signed.map { $0?.rawRevocationType }))::text[],
                \(PostgresArray(signed.map { $0?.revocationPercentage }))::integer[],
                \(PostgresArray(signed.map { $0?.rawOfferDiscountType }))::text[],
                \(PostgresArray(signed.map { $0?.offerPeriod }))::text[],
                \(PostgresArray(signed.map { $0?.storefront }))::text[],
                \(PostgresArray(signed.map { $0?.appTransactionId }))::text[],
                \(PostgresArray(signed.map { $0?.rawProductType }))::text[],
                -- A word that tells of a cancellation is at least as late as it, a new row's too
                -- (an undated v1 REFUND the first word): as the update below keeps it.
                \(PostgresArray(unique.map { entry in [entry.asOf, entry.transaction.cancellationDate].compactMap { $0 }.max() }))::timestamptz[])
            ON CONFLICT (transaction_id) DO UPDATE SET
                -- The terms the journal reads, and whether this write changed them (returned below: the
                -- journal looks again at a row updated only when its money may have moved; PostgreSQL 15
                -- cannot return the row as it stood). An expiry's only part in the money is that there is
                -- one (the type); a purchase date's too: it dates a sale when first recorded.
                (product_id, original_transaction_id, web_order_line_item_id, purchase_date, original_purchase_date, expires_date,
                 cancellation_date, cancellation_reason, revocation_type, revocation_percentage, is_upgraded, is_trial_period,
                 ownership_type, price_milliunits, currency, offer_discount_type, signed_product_type, terms_changed) = (
                SELECT n.*,
                       (t.product_id, t.original_transaction_id, t.web_order_line_item_id, t.purchase_date IS NULL,
                       t.original_purchase_date IS NULL, t.expires_date IS NULL, t.cancellation_date,
                       t.cancellation_reason, t.revocation_type, t.revocation_percentage, t.is_upgraded,
                       t.is_trial_period, t.ownership_type, t.price_milliunits, t.currency, t.offer_discount_type,
                       t.signed_product_type)
                       IS DISTINCT FROM
                       (n.product_id, n.original_transaction_id, n.web_order_line_item_id, n.purchase_date IS NULL,
                       n.original_purchase_date IS NULL, n.expires_date IS NULL, n.cancellation_date,
                       n.cancellation_reason, n.revocation_type, n.revocation_percentage, n.is_upgraded,
                       n.is_trial_period, n.ownership_type, n.price_milliunits, n.currency, n.offer_discount_type,
                       n.signed_product_type)
                FROM (SELECT
                    EXCLUDED.product_id AS product_id,
                    COALESCE(EXCLUDED.original_transaction_id, t.original_transaction_id) AS original_transaction_id,
                    COALESCE(EXCLUDED.web_order_line_item_id, t.web_order_line_item_id) AS web_order_line_item_id,
                    COALESCE(EXCLUDED.purchase_date, t.purchase_date) AS purchase_date,
                    COALESCE(EXCLUDED.original_purchase_date, t.original_purchase_date) AS original_purchase_date,
                    COALESCE(EXCLUDED.expires_date, t.expires_date) AS expires_date,
                    -- A cancellation is state, as of Apple's word: an older signed snapshot keeps the
                    -- row's (filling in how its money went when it tells of the same cancellation), a
                    -- current word decides (without one, the purchase was reinstated), an undated
                    -- word cannot bring back one the row's later word no longer showed.
                    CASE WHEN EXCLUDED.apple_as_of < t.apple_as_of THEN t.cancellation_date
                         WHEN EXCLUDED.apple_as_of IS NOT NULL THEN EXCLUDED.cancellation_date
                         WHEN t.cancellation_date IS NULL AND t.apple_as_of >= EXCLUDED.cancellation_date THEN NULL
                         ELSE COALESCE(EXCLUDED.cancellation_date, t.cancellation_date) END AS cancellation_date,
                    CASE WHEN EXCLUDED.apple_as_of < t.apple_as_of
                              THEN CASE WHEN t.cancellation_date = EXCLUDED.cancellation_date THEN COALESCE(t.cancellation_reason, EXCLUDED.cancellation_reason) ELSE t.cancellation_reason END
                         WHEN EXCLUDED.apple_as_of IS NOT NULL AND EXCLUDED.cancellation_date IS NULL THEN NULL
                         WHEN EXCLUDED.apple_as_of IS NULL AND t.cancellation_date IS NULL AND t.apple_as_of >= EXCLUDED.cancellation_date THEN t.cancellation_reason
                         ELSE COALESCE(EXCLUDED.cancellation_reason, t.cancellation_reason) END AS cancellation_reason,
                    CASE WHEN EXCLUDED.apple_as_of < t.apple_as_of
                              THEN CASE WHEN t.cancellation_date = EXCLUDED.cancellation_date THEN COALESCE(t.revocation_type, EXCLUDED.revocation_type) ELSE t.revocation_type END
                         -- Another cancellation than the row's: its own terms, or none.
                         WHEN EXCLUDED.cancellation_date <> t.cancellation_date THEN EXCLUDED.revocation_type
                         WHEN EXCLUDED.apple_as_of IS NOT NULL AND EXCLUDED.cancellation_date IS NULL THEN NULL
                         WHEN EXCLUDED.apple_as_of IS NULL AND t.cancellation_date IS NULL AND t.apple_as_of >= EXCLUDED.cancellation_date THEN t.revocation_type
                         ELSE COALESCE(EXCLUDED.revocation_type, t.revocation_type) END AS revocation_type,
                    CASE WHEN EXCLUDED.apple_as_of < t.apple_as_of
                              THEN CASE WHEN t.cancellation_date = EXCLUDED.cancellation_date THEN COALESCE(t.revocation_percentage, EXCLUDED.revocation_percentage) ELSE t.revocation_percentage END
                         -- Another cancellation than the row's: its own terms, or none.
                         WHEN EXCLUDED.cancellation_date <> t.cancellation_date THEN EXCLUDED.revocation_percentage
                         WHEN EXCLUDED.apple_as_of IS NOT NULL AND EXCLUDED.cancellation_date IS NULL THEN NULL
                         WHEN EXCLUDED.apple_as_of IS NULL AND t.cancellation_date IS NULL AND t.apple_as_of >= EXCLUDED.cancellation_date THEN t.revocation_percentage
                         ELSE COALESCE(EXCLUDED.revocation_percentage, t.revocation_percentage) END AS revocation_percentage,
                    COALESCE(EXCLUDED.is_upgraded, t.is_upgraded) AS is_upgraded,
                    COALESCE(EXCLUDED.is_trial_period, t.is_trial_period) AS is_trial_period,
                    COALESCE(EXCLUDED.ownership_type, t.ownership_type) AS ownership_type,
                    COALESCE(EXCLUDED.price_milliunits, t.price_milliunits) AS price_milliunits,
                    COALESCE(EXCLUDED.currency, t.currency) AS currency,
                    COALESCE(EXCLUDED.offer_discount_type, t.offer_discount_type) AS offer_discount_type,
                    COALESCE(EXCLUDED.signed_product_type, t.signed_product_type) AS signed_product_type
                ) n),
                is_in_intro_offer_period      = COALESCE(EXCLUDED.is_in_intro_offer_period, t.is_in_intro_offer_period),
                quantity                      = COALESCE(EXCLUDED.quantity, t.quantity),
                subscription_group_identifier = COALESCE(EXCLUDED.subscription_group_identifier, t.subscription_group_identifier),
                offer_code_ref_name           = COALESCE(EXCLUDED.offer_code_ref_name, t.offer_code_ref_name),
                promotional_offer_id          = COALESCE(EXCLUDED.promotional_offer_id, t.promotional_offer_id),
                environment                   = COALESCE(EXCLUDED.environment, t.environment),
                source                        = EXCLUDED.source,
                offer_period                  = COALESCE(EXCLUDED.offer_period, t.offer_period),
                storefront                    = COALESCE(EXCLUDED.storefront, t.storefront),
                app_transaction_id            = COALESCE(EXCLUDED.app_transaction_id, t.app_transaction_id),
                -- A word that tells of a cancellation is at least as late as it (an undated v1 REFUND's too).
                apple_as_of                   = GREATEST(t.apple_as_of, EXCLUDED.apple_as_of, EXCLUDED.cancellation_date),
                updated_at                    = now()
            WHERE (t.product_id, t.original_transaction_id, t.purchase_date, t.original_purchase_date, t.expires_date,
                   t.cancellation_date, t.cancellation_reason, t.is_upgraded, t.is_trial_period,
                   t.is_in_intro_offer_period, t.quantity, t.web_order_line_item_id, t.subscription_group_identifier,
                   t.offer_code_ref_name, t.promotional_offer_id, t.ownership_type, t.environment,
                   t.price_milliunits, t.currency, t.revocation_type, t.revocation_percentage, t.offer_discount_type,
                   t.offer_period, t.storefront, t.app_transaction_id, t.signed_product_type)
               IS DISTINCT FROM
                  (EXCLUDED.product_id, COALESCE(EXCLUDED.original_transaction_id, t.original_transaction_id),
                   COALESCE(EXCLUDED.purchase_date, t.purchase_date),
                   COALESCE(EXCLUDED.original_purchase_date, t.original_purchase_date),
                   COALESCE(EXCLUDED.expires_date, t.expires_date),
                   CASE WHEN EXCLUDED.apple_as_of < t.apple_as_of THEN t.cancellation_date
                                                     WHEN EXCLUDED.apple_as_of IS NOT NULL THEN EXCLUDED.cancellation_date
                                                     WHEN t.cancellation_date IS NULL AND t.apple_as_of >= EXCLUDED.cancellation_date THEN NULL
                                                     ELSE COALESCE(EXCLUDED.cancellation_date, t.cancellation_date) END,
                   CASE WHEN EXCLUDED.apple_as_of < t.apple_as_of
                                                          THEN CASE WHEN t.cancellation_date = EXCLUDED.cancellation_date THEN COALESCE(t.cancellation_reason, EXCLUDED.cancellation_reason) ELSE t.cancellation_reason END
                                                     WHEN EXCLUDED.apple_as_of IS NOT NULL AND EXCLUDED.cancellation_date IS NULL THEN NULL
                                                     WHEN EXCLUDED.apple_as_of IS NULL AND t.cancellation_date IS NULL AND t.apple_as_of >= EXCLUDED.cancellation_date THEN t.cancellation_reason
                                                     ELSE COALESCE(EXCLUDED.cancellation_reason, t.cancellation_reason) END,
                   COALESCE(EXCLUDED.is_upgraded, t.is_upgraded), COALESCE(EXCLUDED.is_trial_period, t.is_trial_period),
                   COALESCE(EXCLUDED.is_in_intro_offer_period, t.is_in_intro_offer_period),
                   COALESCE(EXCLUDED.quantity, t.quantity),
                   COALESCE(EXCLUDED.web_order_line_item_id, t.web_order_line_item_id),
                   COALESCE(EXCLUDED.subscription_group_identifier, t.subscription_group_identifier),
                   COALESCE(EXCLUDED.offer_code_ref_name, t.offer_code_ref_name),
                   COALESCE(EXCLUDED.promotional_offer_id, t.promotional_offer_id),
                   COALESCE(EXCLUDED.ownership_type, t.ownership_type), COALESCE(EXCLUDED.environment, t.environment),
                   COALESCE(EXCLUDED.price_milliunits, t.price_milliunits), COALESCE(EXCLUDED.currency, t.currency),
                   CASE WHEN EXCLUDED.apple_as_of < t.apple_as_of
                                                          THEN CASE WHEN t.cancellation_date = EXCLUDED.cancellation_date THEN COALESCE(t.revocation_type, EXCLUDED.revocation_type) ELSE t.revocation_type END
                                                     -- Another cancellation than the row's: its own terms, or none.
                                                     WHEN EXCLUDED.cancellation_date <> t.cancellation_date THEN EXCLUDED.revocation_type
                                                     WHEN EXCLUDED.apple_as_of IS NOT NULL AND EXCLUDED.cancellation_date IS NULL THEN NULL
                                                     WHEN EXCLUDED.apple_as_of IS NULL AND t.cancellation_date IS NULL AND t.apple_as_of >= EXCLUDED.cancellation_date THEN t.revocation_type
                                                     ELSE COALESCE(EXCLUDED.revocation_type, t.revocation_type) END,
                   CASE WHEN EXCLUDED.apple_as_of < t.apple_as_of
                                                          THEN CASE WHEN t.cancellation_date = EXCLUDED.cancellation_date THEN COALESCE(t.revocation_percentage, EXCLUDED.revocation_percentage) ELSE t.revocation_percentage END
                                                     -- Another cancellation than the row's: its own terms, or none.
                                                     WHEN EXCLUDED.cancellation_date <> t.cancellation_date THEN EXCLUDED.revocation_percentage
                                                     WHEN EXCLUDED.apple_as_of IS NOT NULL AND EXCLUDED.cancellation_date IS NULL THEN NULL
                                                     WHEN EXCLUDED.apple_as_of IS NULL AND t.cancellation_date IS NULL AND t.apple_as_of >= EXCLUDED.cancellation_date THEN t.revocation_percentage
                                                     ELSE COALESCE(EXCLUDED.revocation_percentage, t.revocation_percentage) END,
                   COALESCE(EXCLUDED.offer_discount_type, t.offer_discount_type), COALESCE(EXCLUDED.offer_period, t.offer_period),
                   COALESCE(EXCLUDED.storefront, t.storefront), COALESCE(EXCLUDED.app_transaction_id, t.app_transaction_id),
                   COALESCE(EXCLUDED.signed_product_type, t.signed_product_type))
               -- Apple's later signed word is kept even when it changes nothing else: a signed
               -- snapshot older than it is stale (a live answer's time is noted apart: `noteLatestWord`).
               OR (EXCLUDED.source IN ('notification_v2', 'server_api') AND EXCLUDED.apple_as_of > COALESCE(t.apple_as_of, '-infinity'))
            RETURNING t.*
            )
            -- The rows whose money may have moved, as the journal reads them (`FinanceJournal.ledgerRows`):
            -- read here, not again.
            SELECT w.transaction_id, w.original_transaction_id, w.web_order_line_item_id, w.signed_product_type, w.expires_date,
                   w.purchase_date, w.original_purchase_date, w.cancellation_date, w.cancellation_reason, w.is_upgraded, w.is_trial_period,
                   w.ownership_type, w.offer_discount_type, w.price_milliunits, w.currency, w.revocation_type, w.revocation_percentage,
                   w.apple_as_of, p.type AS catalog_type, p.currency AS catalog_currency,
                   CASE WHEN p.price BETWEEN 0 AND 1e12 THEN round(p.price * 1000)::bigint END AS catalog_price
            FROM written w LEFT JOIN iap.products p ON p.product_id = w.product_id
            WHERE w.terms_changed
            """)
        try await FinanceJournal.record(rows: FinanceJournal.journalTransactions(rows), connection: connection)
    }

    /// Notes that Apple's word on these transactions was as of `asOf` (the account's last live
    /// verification), before a notification's older word is merged: a verification that changed
    /// nothing rewrote no row, and a REFUND signed before it must still be known stale.
    public func noteLatestWord(transactionIds: [String], asOf: Date) async throws {
        try await connection.execute("""
            UPDATE iap.transactions SET apple_as_of = \(asOf)
            WHERE transaction_id = ANY(\(transactionIds)) AND COALESCE(apple_as_of, '-infinity') < \(asOf)
            """)
    }

    func insertPlannedCorrections(runId: Int64, _ corrections: [Correction]) async throws {
        guard !corrections.isEmpty else { return }
        try await connection.execute("""
            INSERT INTO iap.corrections (run_id, planned_by_run_id, account_id, product_id, kind, reason, before, after, status)
            SELECT \(runId), \(runId), * , 'planned' FROM unnest(
                \(PostgresArray(corrections.map(\.accountId)))::text[],
                \(PostgresArray(corrections.map(\.productId)))::text[],
                \(PostgresArray(corrections.map(\.kind.rawValue)))::text[],
                \(PostgresArray(corrections.map(\.reason)))::text[],
                \(PostgresArray(try corrections.map { try EntitlementJSON.encode($0.before) }))::jsonb[],
                \(PostgresArray(try corrections.map { try EntitlementJSON.encode($0.after) }))::jsonb[])
            ON CONFLICT (run_id, account_id, product_id) WHERE status = 'planned' DO NOTHING
            """)
    }
}
