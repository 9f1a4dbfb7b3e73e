-- Every night rewrites most receipt rows (last_verified_at, last_status, last_outcome, last_run_id),
-- none of their indexed columns: with a quarter of each page left free the new version can stay on
-- its page, a HOT update that writes no index. Measured over two nights of 20,000 accounts
-- (BENCHMARKS.md, the fourth round's "Tried this round"): HOT updates from 13 % to 40 %, the second
-- night's update 163k buffers instead of 224k. Pages written from now on keep the room; a table
-- rewritten (VACUUM FULL, pg_repack) gets it whole.
ALTER TABLE iap.app_receipts SET (fillfactor = 75);
