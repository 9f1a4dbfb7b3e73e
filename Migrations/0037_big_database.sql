-- migrate: without a transaction
-- Migrations on a big database (docs/database.md, "Migrations on a big database"): what earlier
-- files did in one transaction, holding a table the app server writes all day while reading all
-- of it, done here without holding it. 0003, 0004, 0010, 0017, 0020, 0021, 0024 and 0025 were
-- rewritten to leave it here; a database that applied their earlier texts already has it, and
-- those statements do nothing there. The indexes of the export's pages and of prune are new to
-- every database.

-- Heavy data changes `migrate` makes after the files, in short transactions, resumable: where the
-- last transaction stopped (after_key), what it did so far, when it finished.
CREATE TABLE IF NOT EXISTS iap.schema_backfills (
    name        text PRIMARY KEY,
    after_key   text,
    done        bigint NOT NULL DEFAULT 0,
    queued_at   timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

-- The journal's first recording (0020): owed where the ledger holds rows and the journal none.
INSERT INTO iap.schema_backfills (name)
SELECT 'journal_first_recording'
WHERE EXISTS (SELECT 1 FROM iap.transactions) AND NOT EXISTS (SELECT 1 FROM iap.finance_journal)
ON CONFLICT (name) DO NOTHING;

-- The ledger's cancellation times (LedgerCancellationTimes): owed where a row shows a cancellation.
INSERT INTO iap.schema_backfills (name)
SELECT 'ledger_cancellation_times' WHERE EXISTS (SELECT 1 FROM iap.transactions WHERE cancellation_date IS NOT NULL)
ON CONFLICT (name) DO NOTHING;

-- Checks added NOT VALID, validated here: a read of the table that lets its writes go on.
ALTER TABLE iap.corrections VALIDATE CONSTRAINT corrections_status_check;
ALTER TABLE iap.notifications VALIDATE CONSTRAINT notifications_outcome_check;
ALTER TABLE iap.transactions VALIDATE CONSTRAINT transactions_source_check;
ALTER TABLE iap.finance_journal VALIDATE CONSTRAINT finance_journal_event_check;
ALTER TABLE iap.finance_journal VALIDATE CONSTRAINT finance_journal_adjusts_check;
ALTER TABLE iap.finance_journal VALIDATE CONSTRAINT finance_journal_adjustment_names_its_event;

-- Indexes built CONCURRENTLY: an attempt stopped halfway leaves an invalid index, which migrate
-- drops before the next attempt builds it anew; one an attempt finished stays (IF NOT EXISTS).
CREATE INDEX CONCURRENTLY IF NOT EXISTS corrections_planned_idx ON iap.corrections (run_id, id) WHERE status = 'planned';
CREATE INDEX CONCURRENTLY IF NOT EXISTS app_receipts_reverify_idx ON iap.app_receipts (account_id)
    WHERE reverify_requested_at IS NOT NULL;
-- Apple sends a notification again until the app server answers: the same body is stored once.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS notifications_v2_once_idx ON iap.notifications (notification_uuid, md5(body::text))
    WHERE notification_uuid IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS notifications_unprocessed_idx ON iap.notifications (received_at, id)
    WHERE processed_at IS NULL AND quarantined_at IS NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS notifications_consumption_due_idx ON iap.notifications (received_at)
    WHERE consumption_examined_at IS NULL AND notification_uuid IS NOT NULL;
-- A notification's answer, found by the notification: what deleting a notification checks
-- (prune, docs/operating.md, "Retention"), which without it reads every answer for each one.
CREATE INDEX CONCURRENTLY IF NOT EXISTS consumption_answers_notification_idx ON iap.consumption_answers (notification_id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS finance_journal_sale_key_idx ON iap.finance_journal (sale_key) WHERE sale_key IS NOT NULL;
-- An export reads its period a page at a time, each page after the last row of the one before
-- (docs/reports.md, "The finance journal"): the indexes hold the export's whole order, so that a
-- page is a range of an index and never a sort of the period. They replace 0020's and 0025's,
-- which held only its first columns.
CREATE INDEX CONCURRENTLY IF NOT EXISTS finance_journal_event_order_idx
    ON iap.finance_journal (event_time, transaction_id, event, occurrence);
CREATE INDEX CONCURRENTLY IF NOT EXISTS finance_journal_recorded_order_idx
    ON iap.finance_journal (recorded_at, event_time, transaction_id, event, occurrence);
DROP INDEX CONCURRENTLY IF EXISTS iap.finance_journal_event_time_idx;
DROP INDEX CONCURRENTLY IF EXISTS iap.finance_journal_recorded_at_idx;
