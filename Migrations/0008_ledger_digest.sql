-- A digest of the ledger rows the account's last full verification produced, kept on each of its
-- receipts. A nightly run whose answers give the same rows again sends none of them: about a dozen
-- rows per account, unchanged on most nights. NULL (never verified, the blob replaced by the app
-- server, a notification applied, a receipt that did not verify) means "write the ledger".
ALTER TABLE iap.app_receipts ADD COLUMN ledger_digest bigint;
