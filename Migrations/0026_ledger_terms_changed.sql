-- Whether the write that made a ledger row's current version changed a term the finance journal
-- reads (docs/database.md, "The ledger"). The ledger upsert sets it from the row as it stood and
-- returns it, so the journal looks again only at rows whose money may have moved without reading
-- each updated row's before-image a second time: PostgreSQL 15 cannot return the old row, and that
-- probe was the journal's largest cost on a quiet night (88,000 of its 150,000 extra buffers for
-- 20,000 accounts). Nothing else reads it; a row the upsert inserts is journaled whatever it says.
-- A constant default: no rewrite of the ledger.
ALTER TABLE iap.transactions ADD COLUMN terms_changed boolean NOT NULL DEFAULT false;
