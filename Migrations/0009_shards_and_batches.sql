-- One shard predicate for every query that selects by shard: an account belongs to shard K of N
-- when its hash falls there; a NULL count means "no sharding". Inlined by the planner.
CREATE FUNCTION iap.in_shard(account_id text, shard_index bigint, shard_count bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT shard_count IS NULL OR ((hashtextextended(account_id, 0) % shard_count) + shard_count) % shard_count = shard_index $$;

-- The batches a run has committed, counted in the batch's own transaction: a batch retried after a
-- lost COMMIT acknowledgement finds itself already counted and is not written a second time.
ALTER TABLE iap.reconciliation_runs ADD COLUMN batches_written integer NOT NULL DEFAULT 0;
