-- migrate: formerly d8b6bc01932f1119
-- The finance journal (issue 42; docs/reports.md, "The finance journal"): money as it moved,
-- one row per event, appended in the transaction of the ledger change that revealed it and never
-- changed or deleted afterwards, so a month finance closed stays closed and any export can be
-- made again, byte for byte, with --as-of.

-- Apple's signed fields that carry money or its meaning, kept raw in the ledger.
ALTER TABLE iap.transactions
    ADD COLUMN revocation_type       text,
    ADD COLUMN revocation_percentage integer,
    ADD COLUMN offer_discount_type   text,
    ADD COLUMN offer_period          text,
    ADD COLUMN storefront            text,
    ADD COLUMN app_transaction_id    text;

CREATE TABLE iap.finance_journal (
    id                       bigserial PRIMARY KEY,
    event                    text        NOT NULL CHECK (event IN ('purchase', 'renewal', 'refund', 'refund_reversal')),
    -- When the money moved: the purchase, the refund, the reversal.
    event_time               timestamptz NOT NULL,
    -- The nth refund (or reversal) of its transaction: Apple may refund again after a reversal.
    occurrence               integer     NOT NULL DEFAULT 1,
    -- When the job learned it, to the millisecond: what --as-of compares.
    recorded_at              timestamptz NOT NULL,
    -- The ledger row as it stood when the event was recorded.
    account_id               text        NOT NULL,
    product_id               text        NOT NULL,
    product_type             text        NOT NULL,
    transaction_id           text        NOT NULL,
    original_transaction_id  text,
    web_order_line_item_id   text,
    purchase_date            timestamptz,
    expires_date             timestamptz,
    cancellation_date        timestamptz,
    cancellation_reason      integer,
    quantity                 integer,
    is_trial_period          boolean,
    is_in_intro_offer_period boolean,
    offer_code_ref_name      text,
    promotional_offer_id     text,
    ownership_type           text,
    environment              text,
    -- The list price (Apple's signed price, else the catalog's) and what moved, both in milliunits of currency.
    price_milliunits         bigint,
    currency                 text,
    amount_milliunits        bigint,
    amount_source            text        NOT NULL CHECK (amount_source IN ('signed', 'catalog', 'none')),
    revocation_type          text,
    revocation_percentage    integer,
    storefront               text,
    UNIQUE (transaction_id, event, occurrence)
);

-- Exports read a period in order. An account's events (explain) are found through its ledger's
-- transaction ids and the unique index: one index fewer to keep up on every night's inserts.
CREATE INDEX finance_journal_event_time_idx ON iap.finance_journal (event_time, transaction_id);

-- Append-only, by the database: a closed period's figures cannot change after the fact.
CREATE FUNCTION iap.finance_journal_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'iap.finance_journal is append-only: % refused (a change is a new event)', TG_OP;
END $$;
CREATE TRIGGER finance_journal_append_only BEFORE UPDATE OR DELETE ON iap.finance_journal
    FOR EACH ROW EXECUTE FUNCTION iap.finance_journal_is_append_only();
CREATE TRIGGER finance_journal_no_truncate BEFORE TRUNCATE ON iap.finance_journal
    FOR EACH STATEMENT EXECUTE FUNCTION iap.finance_journal_is_append_only();

-- Records the money events these ledger rows reveal and the journal lacks. Called in the
-- transaction that wrote them (Storage's ledger upsert), and once below for the ledger as it is.
--
-- - purchase (transaction_id = original_transaction_id) and renewal (the other transactions of a
--   subscription), once each, at purchase_date: the price (signed, else catalog), 0 for a free
--   trial (signed price 0, offer_discount_type FREE_TRIAL, is_trial_period) and for a
--   FAMILY_SHARED copy (the organizer's purchase carries the money);
-- - refund, at cancellation_date, when the ledger shows one the journal has not (again after a
--   reversal): minus what was paid, or that times revocation_percentage / 100000 for
--   REFUND_PRORATED, rounded half away from zero to a milliunit; none for an upgrade, a
--   cancellation reason other than 0 or 1, FAMILY_REVOKE or a FAMILY_SHARED copy (no money moved).
--
-- Exports take the key below exclusively to read their "as of" time: every writer holds it
-- shared from before its rows are stamped until it commits, so no event stamped before an
-- export's time can commit after it.
CREATE FUNCTION iap.record_finance_events(transaction_ids text[]) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    recorded integer;
    stamp timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(125835670023786);  -- "rrfinj": FinanceLedger.recordingKey
    -- One time for what one call records, taken once the lock is held.
    stamp := date_trunc('milliseconds', clock_timestamp());
    WITH ledger AS (
        SELECT t.*,
               COALESCE(p.type, CASE WHEN t.expires_date IS NOT NULL THEN 'auto_renewable' ELSE 'non_consumable' END) AS p_type,
               -- The catalog is the operator's: a price past a trillion is no price, never an overflow.
               COALESCE(t.price_milliunits, CASE WHEN p.price BETWEEN 0 AND 1e12 THEN round(p.price * 1000)::bigint END) AS list_price,
               CASE WHEN t.price_milliunits IS NOT NULL THEN t.currency ELSE p.currency END AS list_currency,
               CASE WHEN t.price_milliunits IS NOT NULL THEN 'signed' WHEN p.price BETWEEN 0 AND 1e12 THEN 'catalog' ELSE 'none' END
                   AS price_source,
               t.ownership_type = 'FAMILY_SHARED' OR t.offer_discount_type = 'FREE_TRIAL' OR t.is_trial_period IS TRUE
                   OR t.price_milliunits = 0 AS paid_nothing
        FROM iap.transactions t LEFT JOIN iap.products p USING (product_id)
        WHERE t.transaction_id = ANY(transaction_ids)
    ), journaled AS (
        SELECT transaction_id, bool_or(event IN ('purchase', 'renewal')) AS sold,
               count(*) FILTER (WHERE event = 'refund') AS refunds, count(*) FILTER (WHERE event = 'refund_reversal') AS reversals
        FROM iap.finance_journal WHERE transaction_id = ANY(transaction_ids) GROUP BY transaction_id
    ), events AS (
        SELECT CASE WHEN l.transaction_id = COALESCE(l.original_transaction_id, l.transaction_id) THEN 'purchase' ELSE 'renewal' END
                   AS event,
               l.purchase_date AS event_time, 1 AS occurrence,
               CASE WHEN l.paid_nothing THEN 0 ELSE l.list_price END AS amount,
               l.*
        FROM ledger l LEFT JOIN journaled j USING (transaction_id)
        WHERE j.sold IS NOT TRUE AND l.purchase_date IS NOT NULL
          AND (l.transaction_id = COALESCE(l.original_transaction_id, l.transaction_id) OR l.p_type IN ('auto_renewable', 'non_renewing'))
        UNION ALL
        SELECT 'refund', l.cancellation_date, COALESCE(j.refunds, 0) + 1,
               -(CASE WHEN l.paid_nothing THEN 0
                      WHEN l.revocation_type = 'REFUND_PRORATED'
                          THEN round(l.list_price::numeric * l.revocation_percentage / 100000)::bigint
                      ELSE l.list_price END),
               l.*
        FROM ledger l LEFT JOIN journaled j USING (transaction_id)
        WHERE l.cancellation_date IS NOT NULL AND COALESCE(j.refunds, 0) = COALESCE(j.reversals, 0)
          AND COALESCE(l.cancellation_reason, 0) IN (0, 1) AND l.is_upgraded IS NOT TRUE
          AND l.revocation_type IS DISTINCT FROM 'FAMILY_REVOKE' AND l.ownership_type IS DISTINCT FROM 'FAMILY_SHARED'
    )
    INSERT INTO iap.finance_journal (
        event, event_time, occurrence, recorded_at, account_id, product_id, product_type, transaction_id, original_transaction_id,
        web_order_line_item_id, purchase_date, expires_date, cancellation_date, cancellation_reason, quantity, is_trial_period,
        is_in_intro_offer_period, offer_code_ref_name, promotional_offer_id, ownership_type, environment, price_milliunits,
        currency, amount_milliunits, amount_source, revocation_type, revocation_percentage, storefront)
    SELECT event, event_time, occurrence, stamp, account_id, product_id, p_type,
           transaction_id, original_transaction_id, web_order_line_item_id, purchase_date, expires_date, cancellation_date,
           cancellation_reason, quantity, is_trial_period, is_in_intro_offer_period, offer_code_ref_name, promotional_offer_id,
           ownership_type, environment, list_price, list_currency, amount,
           CASE WHEN amount IS NULL THEN 'none' ELSE price_source END, revocation_type, revocation_percentage, storefront
    FROM events
    ON CONFLICT (transaction_id, event, occurrence) DO NOTHING;
    GET DIAGNOSTICS recorded = ROW_COUNT;
    RETURN recorded;
END $$;

-- A refund reversed (Apple's REFUND_REVERSED): the opposite of the last refund not yet
-- reversed, at the reversal's own time. Called before the ledger's refund is cleared.
CREATE FUNCTION iap.record_refund_reversal(reversed_transaction_id text, reversed_at timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    recorded integer;
    stamp timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(125835670023786);
    stamp := date_trunc('milliseconds', clock_timestamp());
    INSERT INTO iap.finance_journal (
        event, event_time, occurrence, recorded_at, account_id, product_id, product_type, transaction_id, original_transaction_id,
        web_order_line_item_id, purchase_date, expires_date, cancellation_date, cancellation_reason, quantity, is_trial_period,
        is_in_intro_offer_period, offer_code_ref_name, promotional_offer_id, ownership_type, environment, price_milliunits,
        currency, amount_milliunits, amount_source, revocation_type, revocation_percentage, storefront)
    SELECT 'refund_reversal', reversed_at, r.occurrence, stamp, r.account_id, r.product_id,
           r.product_type, r.transaction_id, r.original_transaction_id, r.web_order_line_item_id, r.purchase_date, r.expires_date,
           r.cancellation_date, r.cancellation_reason, r.quantity, r.is_trial_period, r.is_in_intro_offer_period,
           r.offer_code_ref_name, r.promotional_offer_id, r.ownership_type, r.environment, r.price_milliunits, r.currency,
           -r.amount_milliunits, r.amount_source, r.revocation_type, r.revocation_percentage, r.storefront
    FROM iap.finance_journal r
    WHERE r.transaction_id = reversed_transaction_id AND r.event = 'refund'
      AND NOT EXISTS (SELECT 1 FROM iap.finance_journal v
                      WHERE v.transaction_id = r.transaction_id AND v.event = 'refund_reversal' AND v.occurrence = r.occurrence)
    ON CONFLICT (transaction_id, event, occurrence) DO NOTHING;
    GET DIAGNOSTICS recorded = ROW_COUNT;
    RETURN recorded;
END $$;

-- The ledger's existing events are recorded by migrate once every file is applied, a thousand
-- ledger rows a transaction (0037; docs/database.md, "Migrations on a big database"): one call
-- over the whole ledger here passed PostgreSQL's 1 GB array limit near 50 million rows and wrote
-- the whole journal in one transaction.
