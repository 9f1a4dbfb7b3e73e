-- The original transaction ids of the account's ledger when this receipt last verified: where the
-- App Store Server API is asked about the account (contract section 9), read with the receipt, so
-- no query of the ledger by account is needed.
ALTER TABLE iap.app_receipts ADD COLUMN ledger_original_transaction_ids text[];
