-- The accounts a rolling run planned to verify, in the order it verifies them: those a notification
-- made due, then those at risk, then the rest oldest-verified first, cut to what the run's window
-- holds at the App Store Server API budget. The run pages through it by position; a later plan
-- removes the schedules of runs that have ended.
CREATE TABLE iap.run_schedule (
    run_id     bigint  NOT NULL REFERENCES iap.reconciliation_runs (id) ON DELETE CASCADE,
    position   integer NOT NULL,
    account_id text    NOT NULL,
    reason     text    NOT NULL,  -- notified, at_risk, cycle
    PRIMARY KEY (run_id, position)
);
