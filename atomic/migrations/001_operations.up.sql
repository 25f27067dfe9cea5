-- One row per operation ID (atomic.WithID): the outcome of the operation
-- that carried it, written in the operation's own statement, so that it
-- commits with the effect or not at all. The primary key is what keeps two
-- executions of an ID from both applying: the second waits for the first's
-- row and records nothing.
--
-- outcome is 'applied' (value: what the operation left; keys and vals: a
-- batch's new values), 'insufficient' or 'conflict' (value: the value that
-- refused it), 'not_found', or 'abandoned' (Resolve found no record and
-- wrote this one, so that the operation can no longer apply). amount is the
-- operation's amount or compared value, bound its floor or cap: enough to
-- rebuild the error it returned.
--
-- scope is the store that recorded it (its table's schema, name and
-- columns): stores that share this table read and replay only their own.
--
-- The ID is a UUIDv7: it carries the time it was minted, and IDs sort by
-- it. An ID older than the stores' Retention is refused, so Purge deletes
-- the records below the ID of that age, in primary-key order: the table
-- needs no other index, and an operation writes one heap row and one index
-- entry.
CREATE TABLE {{atomic_operations}} (
	id          uuid        PRIMARY KEY,
	scope       text        NOT NULL,
	fingerprint bytea       NOT NULL,
	op          text        NOT NULL,
	key         text        NOT NULL,
	outcome     text        NOT NULL CHECK (outcome IN ('applied', 'insufficient', 'conflict', 'not_found', 'abandoned')),
	value       bigint,
	amount      bigint,
	bound       bigint,
	keys        text[],
	vals        bigint[]
);
