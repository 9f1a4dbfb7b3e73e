-- The renewal state Apple gave for each subscription chain at the account's last full
-- verification (verifyReceipt's pending_renewal_info, the Server API's signed renewal info):
-- with the ledger, the evidence `explain` re-applies the entitlement rules to (contract section
-- 10) without asking Apple. Replaced whole, per account, whenever the run writes the ledger.
CREATE TABLE iap.renewals (
    account_id                  text NOT NULL,
    -- '' when Apple's answer named no original transaction (seen in real answers).
    original_transaction_id     text NOT NULL,
    product_id                  text NOT NULL DEFAULT '',
    auto_renew_product_id       text,
    auto_renew_status           boolean,
    expiration_intent           integer,
    grace_period_expires_date   timestamptz,
    is_in_billing_retry_period  boolean,
    environment                 text NOT NULL CHECK (environment IN ('Production', 'Sandbox')),
    updated_at                  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account_id, original_transaction_id, product_id, environment)
);
