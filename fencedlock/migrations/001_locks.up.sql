-- Tokens come from one sequence: it never goes back, so a token stays larger
-- than every earlier one for the same name even after the name's row is
-- purged, and NO CYCLE makes exhaustion an error rather than a wrap.
CREATE SEQUENCE {{lock_tokens}} AS bigint NO CYCLE;

CREATE TABLE {{locks}} (
	name        text        PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 255),
	holder      text        NOT NULL CHECK (octet_length(holder) <= 255),
	token       bigint      NOT NULL,
	acquired_at timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL
);

CREATE INDEX {{bare locks_expires_at}} ON {{locks}} (expires_at);
