-- 0004_events_time: an index for reading events in time order across tenants.
--
-- The event list, the live stream (GET /v1/events/stream) and the webhook dispatcher
-- read events in (occurred_at, id) order; with a platform key, or for the dispatcher's
-- replay of a time range, no tenant or identity narrows the read, and without this
-- index each such read scanned the table. Nothing existing changes.

CREATE INDEX events_time ON events(occurred_at, id);
