-- Deduplication by event, for consumers with Dedupe on (and Inbox.Dedupe).
-- inbox_events holds the event IDs applied per (group, topic), written in
-- the transaction that applies them; the primary key makes a second copy
-- of an event wait for the first one's transaction and then find it. Rows
-- older than the retention are purged (Inbox.Purge).
CREATE TABLE {{inbox_events}} (
	group_id   text        NOT NULL CHECK (octet_length(group_id) BETWEEN 1 AND 255),
	topic      text        NOT NULL CHECK (octet_length(topic) BETWEEN 1 AND 255),
	event_id   text        NOT NULL CHECK (octet_length(event_id) BETWEEN 1 AND 255),
	applied_at timestamptz NOT NULL,
	PRIMARY KEY (group_id, topic, event_id)
);
CREATE INDEX {{bare inbox_events_applied}} ON {{inbox_events}} (group_id, topic, applied_at);

-- inbox_entities holds, per entity (the message key), the highest event
-- sequence applied: a message whose sequence is not above it is an older
-- event or a copy, and is not applied. One row per entity, never purged:
-- deleting one would let an older event of the entity be applied again.
CREATE TABLE {{inbox_entities}} (
	group_id text   NOT NULL CHECK (octet_length(group_id) BETWEEN 1 AND 255),
	topic    text   NOT NULL CHECK (octet_length(topic) BETWEEN 1 AND 255),
	entity   bytea  NOT NULL CHECK (octet_length(entity) BETWEEN 1 AND 255),
	seq      bigint NOT NULL CHECK (seq > 0),
	PRIMARY KEY (group_id, topic, entity)
);
