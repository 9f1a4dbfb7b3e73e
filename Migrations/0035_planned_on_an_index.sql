-- migrate: without a transaction
-- Every query the job issues planned on an index (docs/database.md, "Planned on an index"), as a
-- big app's tables need: an account's ledger and notifications (explain, the consumption
-- request's holders), a product's accounts (backfill --product), the quarantined notifications a
-- run lists and the rejected ones it looks at again. Two ledger indexes nothing reads any more
-- (purchase_date, cancellation_date) cost every ledger write: dropped. Built and dropped
-- CONCURRENTLY, outside a transaction, so that the app server's writes are not held; a build
-- that stopped halfway leaves an invalid index, dropped and built anew here.
DROP INDEX CONCURRENTLY IF EXISTS iap.transactions_account_idx;
CREATE INDEX CONCURRENTLY transactions_account_idx ON iap.transactions (account_id);
DROP INDEX CONCURRENTLY IF EXISTS iap.transactions_product_idx;
CREATE INDEX CONCURRENTLY transactions_product_idx ON iap.transactions (product_id);
DROP INDEX CONCURRENTLY IF EXISTS iap.entitlements_product_idx;
CREATE INDEX CONCURRENTLY entitlements_product_idx ON iap.entitlements (product_id);
DROP INDEX CONCURRENTLY IF EXISTS iap.notifications_account_idx;
CREATE INDEX CONCURRENTLY notifications_account_idx ON iap.notifications (account_id, received_at);
DROP INDEX CONCURRENTLY IF EXISTS iap.notifications_quarantined_idx;
CREATE INDEX CONCURRENTLY notifications_quarantined_idx ON iap.notifications (quarantined_at, id) WHERE quarantined_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS iap.notifications_rejected_idx;
CREATE INDEX CONCURRENTLY notifications_rejected_idx ON iap.notifications (rejected_configuration)
    WHERE outcome = 'rejected' AND quarantined_at IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS iap.transactions_purchase_date_idx;
DROP INDEX CONCURRENTLY IF EXISTS iap.transactions_cancellation_date_idx;
