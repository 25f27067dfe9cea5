-- The documents: one row per document, with the version that optimistic
-- updates compare and bump.
CREATE TABLE IF NOT EXISTS documents (
	id      text   PRIMARY KEY,
	body    text   NOT NULL,
	version bigint NOT NULL DEFAULT 1,
	-- Only the fenced lock needs this column: the highest fencing token that
	-- read or wrote the row (fencedlock.Fence). Drop it with the lock.
	fencing_token bigint NOT NULL DEFAULT 0
);
