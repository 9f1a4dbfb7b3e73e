-- Runs in a row Apple called this very blob malformed (21002) (docs/apple.md, "A receipt that keeps
-- failing"): only that, counted apart from `attempts` (any failure), so that six nights of Apple's
-- 5xx and one 21002 never set a receipt aside. A blob replaced (by the app server: a restore, a new
-- purchase; or by the job with Apple's fresher one) starts over: its count back to 0 and its next
-- attempt at once, a receipt set aside included.
ALTER TABLE iap.app_receipts ADD COLUMN malformed_runs integer NOT NULL DEFAULT 0;

CREATE FUNCTION iap.receipt_blob_replaced() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.malformed_runs := 0;
    NEW.next_attempt_at := NULL;
    RETURN NEW;
END
$$;

-- Only a receipt waiting (deferred, failed, set aside) has anything to start over: the cheap test
-- first, so that the nightly update of millions of verified rows never compares their blobs.
CREATE TRIGGER app_receipts_blob_replaced BEFORE UPDATE OF latest_receipt ON iap.app_receipts
    FOR EACH ROW WHEN ((OLD.malformed_runs > 0 OR OLD.next_attempt_at IS NOT NULL)
                       AND OLD.latest_receipt IS DISTINCT FROM NEW.latest_receipt)
    EXECUTE FUNCTION iap.receipt_blob_replaced();
