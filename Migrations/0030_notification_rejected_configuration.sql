-- A V2 notification rejected by a check of the app's configuration (its bundle id, its app Apple ID,
-- its environment) keeps the fingerprint of the configuration that rejected it (docs/notifications.md,
-- "Rejected for the app's configuration"). A run whose configuration differs examines it again: a day
-- of Apple's notifications refused for a wrong bundle id is applied once the id is fixed, instead of
-- being lost (its notificationUUID is stored, so neither Apple's history nor the app server's copy
-- would be examined again). NULL for every other outcome and every other rejection: a body that
-- fails its signature or chain stays rejected.
ALTER TABLE iap.notifications ADD COLUMN rejected_configuration text;
