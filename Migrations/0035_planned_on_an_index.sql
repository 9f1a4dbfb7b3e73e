-- migrate: without a transaction
-- Every query the job issues planned on an index (docs/database.md, "Planned on an index"), as a
-- big app's tables need: an account's ledger and notifications (explain, the consumption
-- request's holders), a product's accounts (backfill --product), the quarantined notifications a
-- run lists and the rejected ones it looks at again. Two ledger indexes nothing reads any more
-- (purchase_date, cancellation_date) cost every ledger write: dropped. Built and dropped
-- CONCURRENTLY, outside a transaction, so that the app server's writes are not held. Each index
-- an attempt finished stays (IF NOT EXISTS); one a stopped attempt left invalid is dropped by
-- migrate before the next attempt, which builds it anew.
CREATE INDEX CONCURRENTLY IF NOT EXISTS transactions_account_idx ON iap.transactions (account_id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS transactions_product_idx ON iap.transactions (product_id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS entitlements_product_idx ON iap.entitlements (product_id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS notifications_account_idx ON iap.notifications (account_id, received_at);
CREATE INDEX CONCURRENTLY IF NOT EXISTS notifications_quarantined_idx ON iap.notifications (quarantined_at, id) WHERE quarantined_at IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS notifications_rejected_idx ON iap.notifications (rejected_configuration)
    WHERE outcome = 'rejected' AND quarantined_at IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS iap.transactions_purchase_date_idx;
DROP INDEX CONCURRENTLY IF EXISTS iap.transactions_cancellation_date_idx;
