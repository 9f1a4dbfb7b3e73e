-- The safety limit counts what it should (docs/guarantees.md, "Safety limit").
--
-- A correction remembers the run that planned it: a run that takes a plan over moves `run_id` to
-- itself and keeps the planner here, so it can tell the plan it took over from its own; it applies
-- an adopted correction only through its own fresh plan of that account (verified again in this
-- run) and marks every adopted row it did not replace superseded. NULL: planned by the run that
-- holds it (every row written before this migration, and rows written by hand).
ALTER TABLE iap.corrections ADD COLUMN planned_by_run_id bigint;

-- When the run had verified and planned all it was going to (the safety limit was judged then),
-- and the counts the limit used for the run's own accounts: shard workers of one night count their
-- finished siblings' accounts and revokes with their own.
ALTER TABLE iap.reconciliation_runs
    ADD COLUMN planned_at timestamptz,
    ADD COLUMN limit_accounts integer,
    ADD COLUMN limit_revoked_accounts integer;
