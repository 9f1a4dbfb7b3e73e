-- Poison rows (contract section 11): a stored notification whose processing was started and never
-- finished three times in a row (the process died: a trap, an out-of-memory kill) is set aside with
-- its reason, skipped by later runs until `backfill --retry-quarantined` releases it. A run counts
-- the start before the work, in a statement of its own, and the notification's outcome, written in
-- the transaction of its effects, sets the count back to 0: a SIGKILL in the middle counts.
ALTER TABLE iap.notifications
    ADD COLUMN unfinished_starts smallint NOT NULL DEFAULT 0,
    ADD COLUMN quarantined_at    timestamptz,
    ADD COLUMN quarantine_reason text;

DROP INDEX iap.notifications_unprocessed_idx;
CREATE INDEX notifications_unprocessed_idx ON iap.notifications (received_at, id)
    WHERE processed_at IS NULL AND quarantined_at IS NULL;
