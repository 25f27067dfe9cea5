-- Leased-mode fencing tokens come from one sequence, minted after the row
-- lock: they never go back, not when a record is released, purged or
-- deleted, and NO CYCLE makes exhaustion an error rather than a wrap.
CREATE SEQUENCE {{idempotency_tokens}} AS bigint NO CYCLE;

-- One row per (tenant, key). state is 'running' (claimed; in transactional
-- mode only ever visible to the claiming transaction), 'done' (result
-- stored) or 'tombstone' (result purged after expiry; the key stays
-- spent until the tombstone itself is purged).
CREATE TABLE {{idempotency_keys}} (
	tenant           text        NOT NULL CHECK (octet_length(tenant) <= 255),
	key              text        NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 255),
	fingerprint      bytea       NOT NULL,
	state            text        NOT NULL CHECK (state IN ('running', 'done', 'tombstone')),
	token            bigint      NOT NULL DEFAULT 0,
	lease_expires_at timestamptz,
	recovery_point   text        NOT NULL DEFAULT '',
	status           integer,
	header           jsonb,
	body             bytea,
	created_at       timestamptz NOT NULL,
	expires_at       timestamptz NOT NULL,
	PRIMARY KEY (tenant, key)
);

CREATE INDEX {{bare idempotency_keys_expires_at}} ON {{idempotency_keys}} (expires_at);
