package inventory

import (
	"context"
	"errors"
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
		if _, ferr := p.store.Decrement(ctx, sku, 2, opts...); answered(ferr) && !errors.Is(ferr, atomic.ErrIDReused) {
			p.env.Broke(ctx, "the ID %s of a sale of one unit of %s, sent with a sale of 2, was answered %v, not ErrIDReused", id, sku, ferr)
		}
	case 2:
		if out, serr := p.other.Resolve(ctx, id); answered(serr) && !errors.Is(serr, atomic.ErrIDReused) {
			p.env.Broke(ctx, "the ID %s, recorded by the inventory table's store, was resolved by inventory_probe's as %+v, %v, not ErrIDReused", id, out, serr)
		}
	case 3:
		old := opid.At(time.Now().Add(-opid.DefaultRetention - time.Hour))
		if _, xerr := p.store.Decrement(ctx, sku, 1, atomic.WithID(old)); answered(xerr) && !errors.Is(xerr, atomic.ErrExpired) {
			p.env.Broke(ctx, "a sale of %s with the ID %s, dated past the store's Retention, was answered %v, not ErrExpired", sku, old, xerr)
		}
	case 4:
		fresh := atomic.WithID(uuid.Must(uuid.NewV7()))
		fid, _ := atomic.OperationID(fresh)
		out, rerr := p.store.Resolve(ctx, fid)
		if !answered(rerr) {
			return
		}
		if !errors.Is(out.Err, atomic.ErrAbandoned) {
			p.env.Broke(ctx, "the fresh ID %s was resolved as %+v, %v, not abandoned", fid, out, rerr)
			return
		}
		if _, lerr := p.store.Decrement(ctx, sku, 1, fresh); answered(lerr) && !errors.Is(lerr, atomic.ErrAbandoned) {
			p.env.Broke(ctx, "a sale of %s with the ID %s, resolved as abandoned before, was answered %v, not ErrAbandoned", sku, fid, lerr)
		}
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
