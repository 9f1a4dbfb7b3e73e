-- Whether the ledger upsert's write changed a term the finance journal reads (docs/database.md,
-- "The ledger"): true for a row it inserts, and for a row it updates set from the row as it stood.
-- The upsert returns it, so the journal looks again only at rows whose money may have moved
-- without reading each updated row's before-image a second time: PostgreSQL 15 cannot return the
-- old row, and that probe was the journal's largest cost on a quiet night (88,000 of its 150,000
-- extra buffers for 20,000 accounts). It means something only in the RETURNING of the statement
-- that set it (a write the upsert skips, or another UPDATE, leaves it as it was): nothing else may
-- read it. A constant default: no rewrite of the ledger.
ALTER TABLE iap.transactions ADD COLUMN terms_changed boolean NOT NULL DEFAULT false;
