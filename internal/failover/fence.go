// Package failover measures what a PostgreSQL failover does to the fences
// lockfree mints — fencedlock tokens, partition epochs and incarnations, the
// tokens of idempotency's leased mode, the singlewriter inbox's epochs — and
// holds the prototype of a minting that survives one, which the packages'
// migrations are to adopt: the SQL functions of [Migrations].
//
// A fence is minted in an era, the WAL timeline the server writes on plus an
// offset that only grows, and is at least era·2^40:
//
//	fence_mint(seq)  = fence_era()·2^40 + nextval(seq)        -- replaces nextval(seq)
//	fence_next(prev) = greatest(prev + 1, fence_era()·2^40)   -- replaces prev + 1
//
// A promotion starts a higher timeline, so what the promoted server mints
// exceeds what the old primary minted, even the values whose WAL it never
// received; fence_era fails rather than let the era go back when the
// database moves to a cluster with a lower timeline, and fence_advance moves
// on to a new era after a failover that creates no timeline. docs/failover.md
// states the mechanism, its limits and the measurements; the tests here run
// them on a real primary and standby (internal/testrepl).
package failover

import (
	"embed"

	"github.com/lockfree-go/lockfree/migrate"
)

// EraShift is the position of the era in a fence: a fence minted in era e
// is at least e << EraShift. Eras range over [0, 2^(63-EraShift)).
const EraShift = 40

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the schema of the fence functions (package "fence"):
// the sequences fence_offset and fence_eras, and the functions fence_era,
// fence_mint, fence_next and fence_advance.
func Migrations() []migrate.Migration {
	return migrate.FromDir("fence", migrationFiles, "migrations")
}
