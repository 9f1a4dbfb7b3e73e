-- Whether the app's own access was imported into iap.entitlements, and when the job's first night
-- began (docs/adoption.md, "The first night"). Until the import is recorded, a first row that
-- grants nothing counts as a revoke for every account whose receipt was stored before the first
-- night began: the app may have given that access from its own table. An account stored after
-- that began is the job's from its start. A fact recorded once, not guessed from who wrote which
-- row: the app server writes entitlements too.
CREATE TABLE iap.adoption (
    id                     smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    -- Set by the import (docs/adoption.md, "The first import"): a missing row means no access.
    access_imported_at     timestamptz,
    -- Set by the first run that was not a dry run, at its start, on the database's clock.
    first_night_started_at timestamptz
);

-- An installation that completed a night before this migration has been running: its access is settled.
INSERT INTO iap.adoption (access_imported_at, first_night_started_at)
SELECT now(), min(started_at) FROM iap.reconciliation_runs WHERE NOT dry_run
HAVING bool_or(status = 'completed');
