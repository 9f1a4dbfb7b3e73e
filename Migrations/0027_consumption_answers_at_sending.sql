-- Answers to CONSUMPTION_REQUEST decided again when they leave (docs/consumption.md, "The body"):
-- consent is read again, of every account that holds the transaction, in the transaction that
-- marks an answer 'sending'; so the request itself is kept, not only the body first decided.

ALTER TABLE iap.consumption_answers
    -- The signed transaction's type and subscription group, and its purchaseDate: the rules read them.
    ADD COLUMN product_type                  text,
    ADD COLUMN subscription_group_identifier text,
    ADD COLUMN purchase_date                 timestamptz,
    -- Every account that held the transaction when it was last decided (account_id is the first).
    ADD COLUMN holders                       text[] NOT NULL DEFAULT '{}',
    -- For no_consent: no_consent_row, consented_false or ambiguous_holder.
    ADD COLUMN why                           text CHECK (why IN ('no_consent_row', 'consented_false', 'ambiguous_holder'));

-- Answers recorded before: their one account, and the request's terms as the ledger has them.
UPDATE iap.consumption_answers SET holders = ARRAY[account_id] WHERE account_id IS NOT NULL;
UPDATE iap.consumption_answers a
SET product_type = t.signed_product_type, subscription_group_identifier = t.subscription_group_identifier,
    purchase_date = t.purchase_date
FROM iap.transactions t WHERE t.transaction_id = a.transaction_id;

-- A holder's answers, for explain.
CREATE INDEX consumption_answers_holders_idx ON iap.consumption_answers USING gin (holders);
-- Requests not matched yet, or waiting for a consent row, examined again every run until their deadline.
CREATE INDEX consumption_answers_undecided_idx ON iap.consumption_answers (deadline)
    WHERE outcome IN ('unmatched', 'no_consent') AND answered_at IS NULL;
