-- Get Notification History read in slices (docs/notifications.md, "Notification history: the delta
-- feed"): read_until moves at the end of each slice stored whole, and a slice a run could not finish
-- (Apple's 429, a page cap, a failure, a kill) is kept with the paginationToken of its next page, so
-- that the next run takes it up there instead of reading the whole window again from its first page.
-- A first read may leave a slice before any has finished: read_until may then be NULL.
ALTER TABLE iap.notification_history_watermarks
    ALTER COLUMN read_until DROP NOT NULL,
    ADD COLUMN slice_start timestamptz,
    ADD COLUMN slice_end timestamptz,
    ADD COLUMN pagination_token text,
    ADD CONSTRAINT notification_history_slice_whole
        CHECK ((slice_start IS NULL) = (slice_end IS NULL) AND (slice_start IS NULL) = (pagination_token IS NULL)
               AND (slice_start IS NULL OR slice_start < slice_end));
