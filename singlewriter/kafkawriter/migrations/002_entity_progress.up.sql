-- The fenced-lock twin's bookkeeping: per entity (named like its lock) the
-- highest sequence number applied and the fencing token of the lock tenure
-- that applied it. Written only by a fenced compare-and-set
-- (fencing_token <= presented AND last_seq < new).
CREATE TABLE {{entity_progress}} (
	name          text   PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 255),
	last_seq      bigint NOT NULL,
	fencing_token bigint NOT NULL DEFAULT 0
);
