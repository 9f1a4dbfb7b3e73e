-- What the receipt's last failed verification said, as failures.csv says it: Apple's or the network's
-- reason (with the HTTP code or Apple status), the attempts made in that run and the hosts asked
-- (`Production>Sandbox`). NULL after a verification. `explain` shows it to support, so that an
-- account that is not verified says why instead of looking like one about to be revoked.
ALTER TABLE iap.app_receipts
    ADD COLUMN last_failure_reason text,
    ADD COLUMN last_failure_attempts integer,
    ADD COLUMN last_failure_endpoints text;
