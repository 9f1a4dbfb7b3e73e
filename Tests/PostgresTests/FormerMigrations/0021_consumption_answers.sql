-- Answering Apple's CONSUMPTION_REQUEST (issue 43; docs/consumption.md): what the app declares
-- (the customer's consent, and optionally usage per transaction), and a record of every request
-- and of the answer given, written before anything is sent.

-- The app's to write (docs/adoption.md shows a trigger from its own table). No row, or
-- consented false: nothing is sent for the account.
CREATE TABLE iap.consumption_consent (
    account_id        text PRIMARY KEY,
    consented         boolean     NOT NULL,
    refund_preference text CHECK (refund_preference IN ('DECLINE', 'GRANT_FULL', 'GRANT_PRORATED')),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- Optional, the app's to write: what it knows of one transaction's use. Without a row the job
-- says what the verified ledger knows.
CREATE TABLE iap.consumption_usage (
    transaction_id         text PRIMARY KEY,
    account_id             text,
    consumption_percentage integer CHECK (consumption_percentage BETWEEN 0 AND 100000),
    delivery_status        text CHECK (delivery_status IN ('DELIVERED', 'UNDELIVERED_QUALITY_ISSUE', 'UNDELIVERED_WRONG_ITEM',
                                                           'UNDELIVERED_SERVER_OUTAGE', 'UNDELIVERED_OTHER')),
    updated_at             timestamptz NOT NULL DEFAULT now()
);

-- One row per request (a notificationUUID): never two answers for one request. A row is
-- recorded 'pending' with the body before the body is sent, turned 'sending' in a statement of its
-- own just before the request leaves, and given its outcome after Apple's answer. A row left
-- 'sending' by a process that died is never sent again (Apple may have it): it ends 'failed'.
CREATE TABLE iap.consumption_answers (
    id                      bigserial PRIMARY KEY,
    notification_id         bigint      NOT NULL REFERENCES iap.notifications (id),
    notification_uuid       text        NOT NULL UNIQUE,
    transaction_id          text        NOT NULL,
    original_transaction_id text,
    product_id              text,
    account_id              text,
    environment             text        NOT NULL,
    -- data.consumptionRequestReason, as Apple signed it.
    reason                  text,
    -- The notification's signedDate (verified): the 12 hours count from here.
    requested_at            timestamptz NOT NULL,
    deadline                timestamptz NOT NULL,
    outcome                 text        NOT NULL CHECK (outcome IN ('pending', 'sending', 'sent', 'no_consent', 'past_deadline', 'refused',
                                                                    'failed', 'unmatched', 'advanced_commerce', 'answered_already')),
    -- The JSON sent, byte for byte (for a pending row, the JSON to send).
    body                    text CHECK (body IS NULL OR body::jsonb IS NOT NULL),
    http_status             integer,
    error_code              bigint,
    detail                  text,
    attempts                integer     NOT NULL DEFAULT 0,
    recorded_at             timestamptz NOT NULL DEFAULT now(),
    answered_at             timestamptz
);

CREATE INDEX consumption_answers_open_idx ON iap.consumption_answers (requested_at) WHERE outcome IN ('pending', 'sending');
CREATE INDEX consumption_answers_transaction_idx ON iap.consumption_answers (transaction_id, answered_at);
CREATE INDEX consumption_answers_account_idx ON iap.consumption_answers (account_id);

-- When answer-consumption-requests verified a stored V2 notification and decided whether it is a
-- request: each one is verified once for this, not every quarter of an hour.
ALTER TABLE iap.notifications ADD COLUMN consumption_examined_at timestamptz;
CREATE INDEX notifications_consumption_due_idx ON iap.notifications (received_at)
    WHERE consumption_examined_at IS NULL AND notification_uuid IS NOT NULL;
