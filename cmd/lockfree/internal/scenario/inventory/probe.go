package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/internal/opid"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// A client of the alternative misuses one sale's operation ID in probeOdds
// (a hostile client of the store), in turn in each way of
// idProber.afterSale, after the sale was answered; each is a promise of
// atomic's operation IDs, and an answer it rules out is a violation
// (Env.Broke):
//   - a late duplicate: the records past the store's Retention purged
//     (engine.PurgeAll), then the sale sent again with its ID: the first
//     answer, not a second sale;
//   - the ID with another operation (the same SKU, 2 units): ErrIDReused;
//   - the ID asked of another store sharing the operations table (the
//     table inventory_probe): ErrIDReused, the other's outcome not told;
//   - a sale of the SKU with an ID dated past the Retention: ErrExpired,
//     and no sale;
//   - a fresh ID resolved before its sale is sent (a client that gave up
//     on an answer it never got): abandoned, and the sale then sent with
//     it ErrAbandoned, no sale.
const probeOdds = 16

const sqlInventoryProbeTable = `CREATE TABLE inventory_probe (sku text PRIMARY KEY, quantity bigint NOT NULL)`

// idProber probes one client's operation IDs.
type idProber struct {
	env   *engine.Env
	store *atomic.Postgres // the alternative's
	other *atomic.Postgres // on inventory_probe, sharing the operations table
	n     int
}

func newIDProber(env *engine.Env, store *atomic.Postgres) (*idProber, error) {
	other, err := atomic.NewPostgres(env.DB, atomic.Table{Name: "inventory_probe", Key: "sku", Value: "quantity"})
	if err != nil {
		return nil, err
	}
	return &idProber{env: env, store: store, other: other}, nil
}

// afterSale probes, one time in probeOdds, the ID of a sale of sku that
// was answered (left, err), its outcome recorded.
func (p *idProber) afterSale(ctx context.Context, sku string, opts []atomic.Option, left int64, err error) {
	id, ok := atomic.OperationID(opts...)
	if p == nil || !ok || (err != nil && !errors.Is(err, atomic.ErrInsufficient)) || p.env.Rand.IntN(probeOdds) != 0 {
		return
	}
	p.n++
	switch p.n % 5 {
	case 0:
		engine.PurgeAll(ctx, p.store.Purge)
		again, aerr := p.store.Decrement(ctx, sku, 1, opts...)
		if answered(aerr) && (again != left || !sameRefusal(aerr, err)) {
			p.env.Broke(ctx, "the sale of %s resent with its recorded ID %s after a purge was answered (%d, %v), not as first (%d, %v)", sku, id, again, aerr, left, err)
		}
	case 1:
		_, err := p.store.Decrement(ctx, sku, 2, opts...)
		p.env.Expect(ctx, err, atomic.ErrIDReused, storeErrors, fmt.Sprintf("the ID %s of a sale of one unit of %s, sent with a sale of 2,", id, sku))
	case 2:
		_, err := p.other.Resolve(ctx, id)
		p.env.Expect(ctx, err, atomic.ErrIDReused, storeErrors, fmt.Sprintf("the ID %s, recorded by the inventory table's store, resolved by inventory_probe's,", id))
	case 3:
		old := opid.At(time.Now().Add(-opid.DefaultRetention - time.Hour))
		_, err := p.store.Decrement(ctx, sku, 1, atomic.WithID(old))
		p.env.Expect(ctx, err, atomic.ErrExpired, storeErrors, fmt.Sprintf("a sale of %s with the ID %s, dated past the store's Retention,", sku, old))
	case 4:
		fresh := uuid.Must(uuid.NewV7())
		out, err := p.store.Resolve(ctx, fresh)
		if !answered(err) {
			return
		}
		p.env.Expect(ctx, out.Err, atomic.ErrAbandoned, storeErrors, fmt.Sprintf("the resolve of the fresh ID %s", fresh))
		_, err = p.store.Decrement(ctx, sku, 1, atomic.WithID(fresh))
		p.env.Expect(ctx, err, atomic.ErrAbandoned, storeErrors, fmt.Sprintf("a sale of %s with the ID %s, resolved before,", sku, fresh))
	}
}

// answered: err is the store's answer (engine.Answered).
func answered(err error) bool { return engine.Answered(err, storeErrors...) }

var storeErrors = []error{atomic.ErrIDReused, atomic.ErrExpired, atomic.ErrAbandoned, atomic.ErrInsufficient, atomic.ErrConflict, atomic.ErrNotFound, atomic.ErrInvalid}

// sameRefusal: a and b are both no refusal, or the same refusal.
func sameRefusal(a, b error) bool {
	var x, y *atomic.InsufficientError
	switch ax, by := errors.As(a, &x), errors.As(b, &y); {
	case ax && by:
		return *x == *y
	case ax || by:
		return false
	}
	return (a == nil) == (b == nil)
}
