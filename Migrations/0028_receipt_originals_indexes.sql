-- migrate: without a transaction
-- The accounts whose stored receipts name an original transaction (the receipt's own decode, and
-- Apple's answer to it): holders of a transaction the ledger may not show yet, whose consent an
-- answer to Apple's refund question needs (docs/consumption.md, "Consent is the app's to declare").
-- Built CONCURRENTLY, outside a transaction: on a big app's app_receipts a plain build would hold
-- the app server's receipt writes for its whole length. A build that stopped halfway leaves an
-- invalid index, which this file, applied again from its start, drops and builds anew.
DROP INDEX CONCURRENTLY IF EXISTS iap.app_receipts_receipt_originals_idx;
CREATE INDEX CONCURRENTLY app_receipts_receipt_originals_idx ON iap.app_receipts USING gin (receipt_original_transaction_ids);
DROP INDEX CONCURRENTLY IF EXISTS iap.app_receipts_ledger_originals_idx;
CREATE INDEX CONCURRENTLY app_receipts_ledger_originals_idx ON iap.app_receipts USING gin (ledger_original_transaction_ids);
