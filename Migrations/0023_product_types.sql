-- Per chain, then per product (docs/guarantees.md, "Entitlement rules"): what a product is decides
-- how it is judged, and a product nothing types is left as stored.

-- Apple's signed `type` of each transaction's product (`Auto-Renewable Subscription`, `Non-Consumable`,
-- `Consumable`, `Non-Renewing Subscription`), as signed; NULL where only verifyReceipt spoke. Kept so
-- that `explain` decides from the ledger exactly as the run did from Apple's answer.
ALTER TABLE iap.transactions ADD COLUMN signed_product_type text;

-- For non-renewing subscriptions: whether a pass bought while another runs starts when that one
-- ends. By default passes overlap (each lasts its duration from its own purchase).
ALTER TABLE iap.products ADD COLUMN passes_stack boolean NOT NULL DEFAULT false;
