-- App Store Server Notifications (v1) as Apple sent them (contract sections 3 and 8).
CREATE TABLE iap.notifications (
    id           bigserial PRIMARY KEY,
    received_at  timestamptz NOT NULL DEFAULT now(),
    body         jsonb NOT NULL,
    processed_at timestamptz,
    outcome      text CHECK (outcome IN ('applied', 'rejected', 'unmatched', 'invalid')),
    account_id   text,
    run_id       bigint REFERENCES iap.reconciliation_runs (id)
);
-- The run drains unprocessed rows oldest first.
CREATE INDEX notifications_unprocessed_idx ON iap.notifications (received_at, id) WHERE processed_at IS NULL;
