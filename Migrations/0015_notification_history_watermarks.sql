-- Get Notification History read as the delta feed: per environment ('Production', 'Sandbox'), the end
-- of the last window whose every page was stored in iap.notifications. A run reads from here (less
-- an overlap) to now, and moves it forward only once the whole window is stored: a run that stops
-- halfway reads the same window again, and storing is idempotent by notificationUUID.
CREATE TABLE iap.notification_history_watermarks (
    environment text PRIMARY KEY,
    read_until  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
