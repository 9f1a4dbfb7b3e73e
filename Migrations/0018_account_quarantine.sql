-- Poison accounts (contract section 11): an account whose processing was started and never
-- finished three times in a row (the process died on it: a trap, an out-of-memory kill) is set
-- aside with its reason, failed unread by later runs until `backfill --retry-quarantined`.
--
-- Kept apart from iap.app_receipts: a receipt row's xmin is how a run tells that the app server
-- wrote a new blob meanwhile, and a mark there would look like one.
--
-- A run marks the accounts of each page it reads (unfinished_starts = 1) and deletes an account's
-- row in the transaction that commits its results, so a process that dies leaves the accounts it
-- had in flight behind. The next run verifies those suspects last and one at a time, each start
-- counted in a statement of its own before the work: an innocent account that was only in flight
-- beside a poison one finishes alone and is cleared; the poison one is counted again. A run that
-- ends without dying takes its own marks back.
CREATE TABLE iap.unfinished_accounts (
    account_id        text PRIMARY KEY,
    unfinished_starts smallint NOT NULL,
    -- The run that set the count last: the one whose clean ending may take it back.
    run_id            bigint,
    quarantined_at    timestamptz,
    quarantine_reason text
);
