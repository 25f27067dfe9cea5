-- The fenced-lock twin's bookkeeping: per (stream, entity) the highest
-- sequence number applied and the fencing token of the lock tenure that
-- applied it. Written only through a fenced update (token <= presented).
CREATE TABLE {{entity_progress}} (
	stream        text   NOT NULL CHECK (octet_length(stream) BETWEEN 1 AND 255),
	entity        text   NOT NULL CHECK (octet_length(entity) BETWEEN 1 AND 255),
	last_seq      bigint NOT NULL,
	fencing_token bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (stream, entity)
);
