-- The shop's orders: a line is added per request, numbered per order.
CREATE TABLE IF NOT EXISTS orders (
	id    text PRIMARY KEY,
	lines int  NOT NULL DEFAULT 0 -- the number of the order's last line
);

-- The lines the service wrote: the source of truth.
CREATE TABLE IF NOT EXISTS order_lines (
	order_id text NOT NULL REFERENCES orders (id),
	n        int  NOT NULL, -- 1, 2, … per order: the order its requests were accepted in
	item     text NOT NULL,
	PRIMARY KEY (order_id, n)
);

-- The read model that the consumer builds from the events: one row per
-- event applied, in the order applied, so that a copy applied twice, a lost
-- event and an event applied out of order all show. (A unique index on
-- (order_id, n) would refuse the copies; it is left out so that the damage
-- shows.)
CREATE TABLE IF NOT EXISTS order_view (
	id       bigserial PRIMARY KEY, -- application order
	order_id text NOT NULL,
	n        int  NOT NULL,
	item     text NOT NULL
);
