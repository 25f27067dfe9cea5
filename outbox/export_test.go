package outbox

import (
	"context"

	"github.com/lockfree-go/lockfree/partition"
)

// Pending, Published and Membership expose the relay's side of a store to
// the tests.
func Pending(ctx context.Context, s Store, p, limit int) ([]Record, error) {
	return s.pending(ctx, p, limit)
}

func Published(ctx context.Context, s Store, e partition.Epoch, recs []Record) error {
	return s.published(ctx, e, recs)
}

func Membership(s Store) partition.Membership { return s.membership() }
