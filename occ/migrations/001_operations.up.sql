-- One row per operation ID (occ.WithID): the write that carried it, written
-- in the write's own statement, so that it commits with the row or not at
-- all. The primary key is what keeps two executions of an ID from both
-- writing: the second waits for the first's row and records nothing.
--
-- outcome is 'applied' (version: what the write left, or the version a
-- delete removed) or 'abandoned' (Resolve found no record and wrote this
-- one, so that the write can no longer apply). A conflict or a missing row
-- writes nothing and is not recorded.
--
-- scope is the store that recorded it (its table's schema, name and key
-- column): stores that share this table read and replay only their own.
--
-- The ID is a UUIDv7: it carries the time it was minted, and IDs sort by
-- it. An ID older than the stores' Retention is refused, so Purge deletes
-- the records below the ID of that age, in primary-key order: the table
-- needs no other index.
CREATE TABLE {{occ_operations}} (
	id          uuid   PRIMARY KEY,
	scope       text   NOT NULL,
	fingerprint bytea  NOT NULL,
	op          text   NOT NULL,
	key         text   NOT NULL,
	outcome     text   NOT NULL CHECK (outcome IN ('applied', 'abandoned')),
	version     bigint
);
