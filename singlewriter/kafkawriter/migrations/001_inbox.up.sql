-- The transactional inbox: one row per (consumer group, topic, partition)
-- holding the next offset to apply and the owner's epoch. A new owner bumps
-- the epoch when it is assigned the partition; every handler transaction
-- advances next_offset only WHERE next_offset = <expected> AND epoch = <its
-- epoch>, so a superseded owner's transaction changes nothing. Rows are never
-- deleted by the package: deleting one would restart its epoch.
-- next_offset < 0 means no message applied yet (-2: start at the first
-- offset, -1: start at the end).
CREATE TABLE {{inbox_offsets}} (
	group_id    text        NOT NULL CHECK (octet_length(group_id) BETWEEN 1 AND 255),
	topic       text        NOT NULL CHECK (octet_length(topic) BETWEEN 1 AND 255),
	partition   integer     NOT NULL CHECK (partition >= 0),
	next_offset bigint      NOT NULL CHECK (next_offset >= -2),
	owner       text        NOT NULL CHECK (octet_length(owner) <= 255),
	epoch       bigint      NOT NULL CHECK (epoch > 0),
	claimed_at  timestamptz NOT NULL,
	updated_at  timestamptz NOT NULL,
	PRIMARY KEY (group_id, topic, partition)
);
