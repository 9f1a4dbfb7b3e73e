-- No query looks ledger rows up by account (the due-account selection reads products, the
-- notifications original_transaction_id, the finance export dates), and every nightly run
-- inserts about a dozen ledger rows per account: an index nothing reads is only write cost.
DROP INDEX IF EXISTS iap.transactions_account_idx;
