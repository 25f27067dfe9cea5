-- The transactional outbox. Write inserts an event in the caller's
-- transaction; a relay publishes each partition's events in id order and
-- deletes them, with a delete fenced by its partition epoch.

-- outbox_sequences: per entity (the event key), the sequence of its last
-- event. Write raises it with fence_next in the statement that inserts the
-- event, so writers of one entity take its row in turn: sequences follow
-- the order their transactions commit in, and grow across a failover
-- (fence eras). Rows are never deleted: a new row would start the entity's
-- sequence again at its era's first value, below what consumers have seen.
CREATE TABLE {{outbox_sequences}} (
	key text   PRIMARY KEY CHECK (octet_length(key) BETWEEN 1 AND 255),
	seq bigint NOT NULL CHECK (seq > 0)
);

-- outbox_events: the events not yet published. id is taken after the
-- entity's row (in the same statement), so an entity's events have
-- increasing ids in sequence order.
CREATE TABLE {{outbox_events}} (
	id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	partition     integer     NOT NULL CHECK (partition >= 0),
	key           text        NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 255),
	seq           bigint      NOT NULL CHECK (seq > 0),
	event_id      text        NOT NULL CHECK (octet_length(event_id) BETWEEN 1 AND 255),
	payload       bytea,
	header_keys   text[]      NOT NULL,
	header_values bytea[]     NOT NULL,
	created_at    timestamptz NOT NULL
);
CREATE INDEX {{bare outbox_events_partition}} ON {{outbox_events}} (partition, id);
