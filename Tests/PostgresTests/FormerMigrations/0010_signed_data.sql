-- Signed data (contract section 9): Server Notifications V2 beside v1, and the ledger's price,
-- currency and source.

-- A V2 notification's notificationUUID, read at ingestion; why a notification was not applied.
ALTER TABLE iap.notifications ADD COLUMN notification_uuid text, ADD COLUMN reason text;
-- recorded: processed with nothing to apply (TEST); duplicate: a notification already applied.
ALTER TABLE iap.notifications DROP CONSTRAINT notifications_outcome_check;
ALTER TABLE iap.notifications ADD CONSTRAINT notifications_outcome_check
    CHECK (outcome IN ('applied', 'rejected', 'unmatched', 'invalid', 'recorded', 'duplicate'));
-- Apple sends a notification again until the app server answers: the same body is stored once.
CREATE UNIQUE INDEX notifications_v2_once_idx ON iap.notifications (notification_uuid, md5(body::text))
    WHERE notification_uuid IS NOT NULL;

-- Signed transactions carry their price (milliunits of currency); the ledger says who wrote a row last.
ALTER TABLE iap.transactions
    ADD COLUMN price_milliunits bigint,
    ADD COLUMN currency text,
    ADD COLUMN source text CHECK (source IN ('verify_receipt', 'notification_v1', 'notification_v2', 'server_api'));
