-- Members hold a lease that they renew by heartbeat; expiry follows the
-- database clock. incarnation tells successive leases of one name apart.
CREATE SEQUENCE {{partition_incarnations}} AS bigint NO CYCLE;

CREATE TABLE {{partition_members}} (
	name        text        PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 255),
	addr        text        NOT NULL CHECK (octet_length(addr) <= 255),
	ring        text        NOT NULL CHECK (octet_length(ring) <= 255),
	incarnation bigint      NOT NULL,
	leaving     boolean     NOT NULL DEFAULT false,
	joined_at   timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL
);

-- One row per partition, never deleted: epoch only increases, so it fences
-- every earlier owner. owner is '' when the partition was released.
CREATE TABLE {{partition_owners}} (
	partition  integer     PRIMARY KEY CHECK (partition >= 0),
	owner      text        NOT NULL CHECK (octet_length(owner) <= 255),
	epoch      bigint      NOT NULL CHECK (epoch >= 0),
	changed_at timestamptz NOT NULL
);
