-- The corrections table as an outbox (issue 35): applied_seq numbers applied corrections in the
-- order their transactions committed, so an app that reads "applied_seq > my cursor" in order
-- sees every applied correction exactly once.
--
-- Why not the id: ids are given when a correction is planned, and it is applied later, by its
-- own run or by the run that adopts it after a crash; shard workers apply side by side. A
-- correction with a smaller id can commit after one with a larger id, and a cursor on the id
-- would skip it. A run gives applied_seq values while it holds a transaction-level advisory lock
-- (RunLock.outboxKey) until its commit, so no transaction can commit a smaller value later.
CREATE SEQUENCE iap.corrections_applied_seq;
ALTER TABLE iap.corrections ADD COLUMN applied_seq bigint;

-- Corrections applied before this migration, in the order they were applied.
UPDATE iap.corrections c SET applied_seq = o.seq
FROM (SELECT id, nextval('iap.corrections_applied_seq') AS seq
      FROM (SELECT id FROM iap.corrections WHERE status = 'applied' ORDER BY applied_at, id) AS applied) AS o
WHERE c.id = o.id;

CREATE UNIQUE INDEX corrections_applied_seq_idx ON iap.corrections (applied_seq) WHERE applied_seq IS NOT NULL;
