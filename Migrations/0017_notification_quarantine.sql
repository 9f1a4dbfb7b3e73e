-- migrate: formerly ac8cf22bdcbbfd5e
-- Poison rows (contract section 11): a stored notification whose processing was started and never
-- finished three times in a row (the process died: a trap, an out-of-memory kill) is set aside with
-- its reason, skipped by later runs until `backfill --retry-quarantined` releases it. A run counts
-- the start before the work, in a statement of its own, and the notification's outcome, written in
-- the transaction of its effects, sets the count back to 0: a SIGKILL in the middle counts.
ALTER TABLE iap.notifications
    ADD COLUMN unfinished_starts smallint NOT NULL DEFAULT 0,
    ADD COLUMN quarantined_at    timestamptz,
    ADD COLUMN quarantine_reason text;

-- The unprocessed ones, less the quarantined: built again by 0037, concurrently (docs/database.md,
-- "Migrations on a big database").
DROP INDEX iap.notifications_unprocessed_idx;
