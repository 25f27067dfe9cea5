-- Each account's ledger: entries numbered 1, 2, 3, … per account, with no
-- gaps and no duplicates; accounts.last_seq is the last number handed out.
CREATE TABLE IF NOT EXISTS accounts (
	id       text   PRIMARY KEY,
	last_seq bigint NOT NULL DEFAULT 0,
	-- Only the fenced lock needs this column: the highest fencing token that
	-- read or wrote the row (fencedlock.Fence). Drop it with the lock.
	fencing_token bigint NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS entries (
	id      bigserial PRIMARY KEY, -- insertion order
	account text      NOT NULL REFERENCES accounts (id),
	seq     bigint    NOT NULL
	-- UNIQUE (account, seq) would make the database refuse the naive lock's
	-- duplicate; it is left out so that the damage shows. It is worth
	-- having: it is a check at the resource, the only place a check helps.
);
