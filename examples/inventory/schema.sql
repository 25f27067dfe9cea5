-- The shop's stock: one row per SKU.
CREATE TABLE IF NOT EXISTS inventory (
	sku      text   PRIMARY KEY,
	quantity bigint NOT NULL CHECK (quantity >= 0),
	-- Only the fenced lock needs this column: the highest fencing token that
	-- read or wrote the row (fencedlock.Fence). The conditional decrement
	-- does not use it; drop it once the lock is gone.
	fencing_token bigint NOT NULL DEFAULT 0
);
-- The CHECK is worth having whatever the code does, but note that it does not
-- catch the naive lock's damage: the paused buyer writes 9, a valid number.
