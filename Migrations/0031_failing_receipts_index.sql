-- migrate: without a transaction
-- The receipts failing run after run (attempts > 0: deferred, failed or invalid since their last
-- verification), which every run lists once they reach --escalate-after (docs/apple.md, "A receipt
-- that keeps failing"): a few rows of a big app's millions, read by this small partial index instead
-- of a scan. Built CONCURRENTLY, outside a transaction, so that the app server's receipt writes are
-- not held; a build that stopped halfway leaves an invalid index, dropped and built anew here.
DROP INDEX CONCURRENTLY IF EXISTS iap.app_receipts_failing_idx;
CREATE INDEX CONCURRENTLY app_receipts_failing_idx ON iap.app_receipts (attempts) WHERE attempts > 0;
