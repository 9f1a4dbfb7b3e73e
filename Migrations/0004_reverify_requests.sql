-- migrate: formerly 690336cfed5b37f6
-- A server notification makes an account's receipts due now, so the same run re-verifies them
-- with Apple. Cleared once a receipt verifies; the time is kept, not a flag, so a request made
-- while a run is under way is not cleared by that run.
-- Its index is built by 0037, concurrently (docs/database.md, "Migrations on a big database").
ALTER TABLE iap.app_receipts ADD COLUMN reverify_requested_at timestamptz;
-- Matching notifications to accounts by the ledger.
CREATE INDEX IF NOT EXISTS transactions_original_transaction_idx ON iap.transactions (original_transaction_id);
