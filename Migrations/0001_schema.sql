-- receipt-reconciler schema, contract section 3. Forward-only: never edit an applied file,
-- add a new numbered one instead (the migrator refuses a changed checksum).

CREATE SCHEMA IF NOT EXISTS iap;

-- One row per stored receipt. The app server inserts and updates these; the job learns
-- environment, status and schedule, and stores Apple's fresher latest_receipt.
CREATE TABLE iap.app_receipts (
    id               bigserial PRIMARY KEY,
    account_id       text NOT NULL,
    bundle_id        text,
    latest_receipt   text NOT NULL,
    environment      text CHECK (environment IN ('Production', 'Sandbox')),
    last_verified_at timestamptz,
    last_status      integer,
    next_attempt_at  timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- Not in the contract; the job's own bookkeeping.
    attempts         integer NOT NULL DEFAULT 0,   -- failed attempts since the last answer (for backoff)
    last_outcome     text,                         -- verified, deferred, failed, invalid_receipt
    last_run_id      bigint
);
-- Keyset pages of accounts, and an account's receipts.
CREATE INDEX app_receipts_account_idx ON iap.app_receipts (account_id, id);
-- backfill --since/--until.
CREATE INDEX app_receipts_updated_at_idx ON iap.app_receipts (updated_at);

-- Optional product catalog.
CREATE TABLE iap.products (
    product_id  text PRIMARY KEY,
    type        text NOT NULL CHECK (type IN ('auto_renewable', 'non_consumable', 'consumable', 'non_renewing')),
    duration    interval,
    entitlement text,
    price       numeric,
    currency    text
);

-- What each account is entitled to, one row per (account, product).
CREATE TABLE iap.entitlements (
    account_id              text NOT NULL,
    product_id              text NOT NULL,
    original_transaction_id text NOT NULL,
    latest_transaction_id   text,
    state                   text NOT NULL
        CHECK (state IN ('active', 'grace_period', 'billing_retry', 'expired', 'refunded', 'upgraded')),
    entitled                boolean NOT NULL,
    expires_at              timestamptz,
    grace_period_expires_at timestamptz,
    auto_renew              boolean,
    auto_renew_product_id   text,
    environment             text,
    ownership_type          text,
    refunded_at             timestamptz,
    updated_at              timestamptz NOT NULL,
    PRIMARY KEY (account_id, product_id),
    CHECK (entitled = (state IN ('active', 'grace_period')))
);
-- Matching notifications to accounts.
CREATE INDEX entitlements_original_transaction_idx ON iap.entitlements (original_transaction_id);

-- The ledger of every transaction Apple reported.
CREATE TABLE iap.transactions (
    transaction_id                text PRIMARY KEY,
    account_id                    text NOT NULL,
    original_transaction_id       text,
    product_id                    text NOT NULL,
    purchase_date                 timestamptz,
    original_purchase_date        timestamptz,
    expires_date                  timestamptz,
    cancellation_date             timestamptz,
    cancellation_reason           integer,
    is_upgraded                   boolean,
    is_trial_period               boolean,
    is_in_intro_offer_period      boolean,
    quantity                      integer,
    web_order_line_item_id        text,
    subscription_group_identifier text,
    offer_code_ref_name           text,
    promotional_offer_id          text,
    ownership_type                text,
    environment                   text,
    -- Not in the contract.
    first_seen_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX transactions_account_idx ON iap.transactions (account_id);
CREATE INDEX transactions_original_transaction_idx ON iap.transactions (original_transaction_id);
-- The finance export reads events by time.
CREATE INDEX transactions_purchase_date_idx ON iap.transactions (purchase_date);
CREATE INDEX transactions_cancellation_date_idx ON iap.transactions (cancellation_date)
    WHERE cancellation_date IS NOT NULL;

CREATE TABLE iap.reconciliation_runs (
    id                       bigserial PRIMARY KEY,
    kind                     text NOT NULL CHECK (kind IN ('nightly', 'backfill')),
    status                   text NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'interrupted', 'aborted')),
    dry_run                  boolean NOT NULL,
    started_at               timestamptz NOT NULL,
    finished_at              timestamptz,
    -- Counts.
    accounts_processed       integer NOT NULL DEFAULT 0,
    accounts_verified        integer NOT NULL DEFAULT 0,
    accounts_unchanged       integer NOT NULL DEFAULT 0,
    accounts_corrected       integer NOT NULL DEFAULT 0,
    accounts_deferred        integer NOT NULL DEFAULT 0,
    accounts_failed          integer NOT NULL DEFAULT 0,
    accounts_invalid_receipt integer NOT NULL DEFAULT 0,
    receipts_processed       integer NOT NULL DEFAULT 0,
    corrections              integer NOT NULL DEFAULT 0,
    apple_requests           integer NOT NULL DEFAULT 0,
    -- What was asked for (flags, shard, selection) and everything else the report shows.
    options                  jsonb NOT NULL DEFAULT '{}',
    statistics               jsonb NOT NULL DEFAULT '{}',
    error                    text
);

CREATE TABLE iap.corrections (
    id         bigserial PRIMARY KEY,
    run_id     bigint NOT NULL REFERENCES iap.reconciliation_runs (id),
    account_id text NOT NULL,
    product_id text NOT NULL,
    kind       text NOT NULL CHECK (kind IN ('grant', 'revoke', 'extend', 'shorten', 'update')),
    reason     text NOT NULL,
    before     jsonb,
    after      jsonb,
    applied_at timestamptz
);
CREATE INDEX corrections_run_idx ON iap.corrections (run_id, id);
CREATE INDEX corrections_account_idx ON iap.corrections (account_id);
