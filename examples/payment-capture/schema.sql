-- The shop's payments: one row per authorised payment, captured once.
CREATE TABLE IF NOT EXISTS payments (
	id       text    PRIMARY KEY,
	amount   bigint  NOT NULL, -- in cents
	captured boolean NOT NULL DEFAULT false,
	-- Only the fenced lock needs this column: the highest fencing token that
	-- read or wrote the row (fencedlock.Fence). Idempotency keys do not use
	-- it; drop it once the lock is gone.
	fencing_token bigint NOT NULL DEFAULT 0
);

-- Every capture recorded, so that the damage shows: the lock-based code
-- records one row per provider charge it knows of.
CREATE TABLE IF NOT EXISTS captures (
	id      bigserial PRIMARY KEY,
	payment text      NOT NULL REFERENCES payments (id),
	-- The provider's charge ID; NULL for a capture recorded in transactional
	-- mode, whose provider call (if any) is made after the commit, e.g. by
	-- an outbox relay that passes the capture's ID as its idempotency key.
	charge  text,
	amount  bigint    NOT NULL
	-- UNIQUE (payment) would make the database refuse the naive lock's second
	-- record; it is left out so that the damage shows. It would not undo the
	-- second charge at the provider.
);
