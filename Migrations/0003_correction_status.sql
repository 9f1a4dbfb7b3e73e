-- migrate: formerly 92b0ed262650249c
-- A run first plans its corrections, checks the safety limits, then applies them. The status
-- says where each correction is: planned (not applied yet, or kept for review after an abort or
-- in a dry run), applied, or superseded (the entitlement changed after planning; not applied).
-- Its check is validated, and its index built, by 0037 (docs/database.md, "Migrations on a big
-- database"): here they would hold the table against every write for a read of all of it.
ALTER TABLE iap.corrections ADD COLUMN status text NOT NULL DEFAULT 'planned';
ALTER TABLE iap.corrections ADD CONSTRAINT corrections_status_check CHECK (status IN ('planned', 'applied', 'superseded')) NOT VALID;

-- The run's shard ("K/N"), revoke counts for the safety limit, and the crashed runs whose planned
-- corrections it took over.
ALTER TABLE iap.reconciliation_runs
    ADD COLUMN shard text,
    ADD COLUMN accounts_revoked integer NOT NULL DEFAULT 0,
    ADD COLUMN held_revokes integer NOT NULL DEFAULT 0,
    ADD COLUMN adopted_from bigint[] NOT NULL DEFAULT '{}';
