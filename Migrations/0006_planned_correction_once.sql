-- A batch retried after a lost connection (whose COMMIT may have landed after all) must not plan
-- the same correction twice.
CREATE UNIQUE INDEX corrections_planned_once_idx ON iap.corrections (run_id, account_id, product_id) WHERE status = 'planned';
