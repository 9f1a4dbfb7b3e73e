-- The finance journal right on every path (docs/reports.md, "Right on every path"): its rules
-- move from the SQL of 0020 into the program (Reconciliation's JournalRules, a pure function
-- tested in-process), so that whichever of Apple's sources spoke first and in whatever order, a
-- sale's net ends equal to the money that moved.

-- Apple's latest word applied to a ledger row: a signed snapshot's signedDate, or the time of a
-- live answer. An older signed snapshot (a REFUND read again after its REFUND_REVERSED) changes
-- nothing; NULL where only stored, undated words (v1 notifications) spoke.
ALTER TABLE iap.transactions ADD COLUMN apple_as_of timestamptz;

-- Better terms later are adjustments: the difference, at the corrected event's time.
ALTER TABLE iap.finance_journal DROP CONSTRAINT finance_journal_event_check;
ALTER TABLE iap.finance_journal
    ADD CONSTRAINT finance_journal_event_check
        CHECK (event IN ('purchase', 'renewal', 'refund', 'refund_reversal', 'adjustment')),
    -- The event an adjustment corrects; NULL on every other event.
    ADD COLUMN adjusts text CHECK (adjusts IN ('purchase', 'renewal', 'refund', 'refund_reversal')),
    -- The purchase an event belongs to (JournalRules.saleKey): a subscription's web order line item,
    -- a non-consumable's original transaction, else the transaction. NULL on rows recorded before
    -- this migration, which are found by their transaction id.
    ADD COLUMN sale_key text,
    ADD CONSTRAINT finance_journal_adjustment_names_its_event CHECK ((event = 'adjustment') = (adjusts IS NOT NULL));
CREATE INDEX finance_journal_sale_key_idx ON iap.finance_journal (sale_key) WHERE sale_key IS NOT NULL;

-- The program records every event now, under the same advisory key (FinanceLedger.recordingKey).
DROP FUNCTION iap.record_finance_events(text[]);
DROP FUNCTION iap.record_refund_reversal(text, timestamptz);

-- Ledger rows whose recorded events the rules must look at again: a signed price or a signed
-- revocation learned after their events were recorded from the catalog, or a subscription
-- purchase recorded twice (a restored copy's transaction id). `migrate` and every run record
-- their adjustments (FinanceJournal.drainBacklog), then delete them from here.
CREATE TABLE iap.journal_backlog (
    transaction_id text PRIMARY KEY
);
INSERT INTO iap.journal_backlog (transaction_id)
SELECT DISTINCT j.transaction_id
FROM iap.finance_journal j JOIN iap.transactions t USING (transaction_id)
WHERE j.amount_source <> 'signed' AND (t.price_milliunits IS NOT NULL OR t.revocation_type IS NOT NULL)
UNION
SELECT t.transaction_id
FROM iap.transactions t
WHERE (t.original_transaction_id, t.web_order_line_item_id) IN (
    SELECT j.original_transaction_id, j.web_order_line_item_id FROM iap.finance_journal j
    WHERE j.event IN ('purchase', 'renewal') AND j.web_order_line_item_id IS NOT NULL AND j.product_type = 'auto_renewable'
      AND j.ownership_type IS DISTINCT FROM 'FAMILY_SHARED'
    GROUP BY j.original_transaction_id, j.web_order_line_item_id HAVING count(*) > 1);
