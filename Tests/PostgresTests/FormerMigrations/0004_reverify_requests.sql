-- A server notification makes an account's receipts due now, so the same run re-verifies them
-- with Apple. Cleared once a receipt verifies; the time is kept, not a flag, so a request made
-- while a run is under way is not cleared by that run.
ALTER TABLE iap.app_receipts ADD COLUMN reverify_requested_at timestamptz;
CREATE INDEX app_receipts_reverify_idx ON iap.app_receipts (account_id) WHERE reverify_requested_at IS NOT NULL;
-- Matching notifications to accounts by the ledger.
CREATE INDEX IF NOT EXISTS transactions_original_transaction_idx ON iap.transactions (original_transaction_id);
