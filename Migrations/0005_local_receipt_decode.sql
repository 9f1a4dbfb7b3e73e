-- What the local decode of the stored blob says (it informs; only Apple's answer decides):
-- the receipt's own bundle id and original transaction ids. A bundle id that differs from the
-- row's bundle_id (a receipt of another app) is a fraud signal the report lists.
ALTER TABLE iap.app_receipts
    ADD COLUMN receipt_bundle_id text,
    ADD COLUMN receipt_original_transaction_ids text[];
