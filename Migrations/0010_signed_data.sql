-- migrate: formerly 6d42cc87f20db383
-- Signed data (contract section 9): Server Notifications V2 beside v1, and the ledger's price,
-- currency and source.

-- A V2 notification's notificationUUID, read at ingestion; why a notification was not applied.
ALTER TABLE iap.notifications ADD COLUMN notification_uuid text, ADD COLUMN reason text;
-- recorded: processed with nothing to apply (TEST); duplicate: a notification already applied.
-- The checks are validated, and the index that stores the same body once is built, by 0037
-- (docs/database.md, "Migrations on a big database").
ALTER TABLE iap.notifications DROP CONSTRAINT notifications_outcome_check;
ALTER TABLE iap.notifications ADD CONSTRAINT notifications_outcome_check
    CHECK (outcome IN ('applied', 'rejected', 'unmatched', 'invalid', 'recorded', 'duplicate')) NOT VALID;

-- Signed transactions carry their price (milliunits of currency); the ledger says who wrote a row last.
ALTER TABLE iap.transactions
    ADD COLUMN price_milliunits bigint,
    ADD COLUMN currency text,
    ADD COLUMN source text,
    ADD CONSTRAINT transactions_source_check
        CHECK (source IN ('verify_receipt', 'notification_v1', 'notification_v2', 'server_api')) NOT VALID;
