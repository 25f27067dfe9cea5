-- The shop's orders: the state that the order's events build, one event at
-- a time, in order: created → paid → packed → shipped.
CREATE TABLE IF NOT EXISTS orders (
	id       text   PRIMARY KEY,
	status   text   NOT NULL DEFAULT 'new',
	last_seq bigint NOT NULL DEFAULT 0, -- the sequence number of the last event applied
	-- Only the fenced lock needs this column: the highest fencing token that
	-- read or wrote the row (fencedlock.Fence). The single writer does not
	-- use it; drop it once the lock is gone.
	fencing_token bigint NOT NULL DEFAULT 0
);

-- Every event applied, in the order it was applied, so that the damage
-- shows.
CREATE TABLE IF NOT EXISTS order_history (
	id       bigserial PRIMARY KEY, -- application order
	order_id text      NOT NULL REFERENCES orders (id),
	seq      bigint    NOT NULL,
	event    text      NOT NULL
	-- UNIQUE (order_id, seq) would make the database refuse the naive lock's
	-- duplicate (its status update is in the same transaction); it is left
	-- out so that the damage shows. It is worth having: a check at the
	-- resource, the only place a check helps.
);
