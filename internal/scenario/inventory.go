package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	lfatomic "github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/fencedlock"
)

// inventoryStock is each SKU's initial quantity: large enough that a run
// does not sell out, so every lost or phantom sale shows in the arithmetic.
const inventoryStock = 10_000_000

const inventoryDDL = `CREATE TABLE inventory (
	sku           text   PRIMARY KEY,
	quantity      bigint NOT NULL,
	fencing_token bigint NOT NULL DEFAULT 0
)`

func init() {
	register(Scenario{
		Name:        "inventory",
		Description: "clients sell one unit of a random SKU; stock never goes below zero and final = initial − accepted",
		Approaches:  []Approach{Alternative, FencedLock, NaiveLock, Raw},
		Labels: map[Approach]string{
			Alternative: "atomic.Decrement: conditional UPDATE … WHERE quantity >= 1",
			FencedLock:  "fencedlock: lock SKU → read → check → fenced write → release",
			NaiveLock:   "lease lock: lock SKU → read → check → unfenced write → release",
			Raw:         "bare SQL: the conditional UPDATE through pgx",
		},
		New: newInventory,
	})
}

type inventory struct {
	env      *Env
	approach Approach
	keys     []string
	accepted []atomic.Int64 // per key
	unsure   []atomic.Int64

	alt   lfatomic.Store
	fence fencedlock.Fence
	// memory twins
	mu    sync.Mutex
	stock []int64
	gates []fencedlock.Gate
}

func newInventory(ctx context.Context, env *Env, a Approach) (Workload, error) {
	w := &inventory{env: env, approach: a, fence: fencedlock.Fence{Table: "inventory", Key: "sku"}}
	for i := 0; i < env.Keys; i++ {
		w.keys = append(w.keys, "sku-"+strconv.Itoa(i))
	}
	w.accepted = make([]atomic.Int64, env.Keys)
	w.unsure = make([]atomic.Int64, env.Keys)
	if env.Memory() {
		if a == Raw {
			return nil, errSkip
		}
		m, err := lfatomic.NewMemory(nil)
		if err != nil {
			return nil, err
		}
		for _, k := range w.keys {
			if err := m.Claim(ctx, k, inventoryStock); err != nil {
				return nil, err
			}
		}
		w.alt = m
		w.stock = make([]int64, env.Keys)
		for i := range w.stock {
			w.stock[i] = inventoryStock
		}
		w.gates = make([]fencedlock.Gate, env.Keys)
		return w, nil
	}
	if _, err := env.Admin.Exec(ctx, inventoryDDL); err != nil {
		return nil, err
	}
	if _, err := env.Admin.Exec(ctx, `INSERT INTO inventory (sku, quantity)
		SELECT 'sku-' || i, $1 FROM generate_series(0, $2 - 1) AS i`, inventoryStock, env.Keys); err != nil {
		return nil, err
	}
	alt, err := lfatomic.NewPostgres(env.DB, lfatomic.Table{Name: "inventory", Key: "sku", Value: "quantity"})
	if err != nil {
		return nil, err
	}
	w.alt = alt
	return w, nil
}

func (w *inventory) Op(ctx context.Context, client int, rnd *rand.Rand) Outcome {
	k := rnd.IntN(len(w.keys))
	sku := w.keys[k]
	var out Outcome
	switch w.approach {
	case Alternative:
		w.env.Pause(ctx, rnd) // no read-write gap to pause in: the check is in the statement
		_, err := w.alt.Decrement(ctx, sku, 1)
		out = w.outcome(err, lfatomic.ErrInsufficient)
	case Raw:
		w.env.Pause(ctx, rnd)
		tag, err := w.env.DB.Exec(ctx, `UPDATE inventory SET quantity = quantity - 1 WHERE sku = $1 AND quantity >= 1`, sku)
		if err == nil && tag.RowsAffected() == 0 {
			return Outcome{Rejected: true}
		}
		out = w.outcome(err, nil)
	case FencedLock, NaiveLock:
		out = lockedOp(ctx, w.env, rnd, "inventory/"+sku, func(ctx context.Context, lease fencedlock.Lease) (Outcome, error) {
			return w.lockedSale(ctx, rnd, k, lease)
		})
	}
	if !out.Rejected && out.Err == nil && !out.Uncertain {
		w.accepted[k].Add(1)
	}
	if out.Uncertain {
		w.unsure[k].Add(1)
	}
	return out
}

// lockedSale is the twins' critical section: read, (pause), check, write.
func (w *inventory) lockedSale(ctx context.Context, rnd *rand.Rand, k int, lease fencedlock.Lease) (Outcome, error) {
	sku := w.keys[k]
	if w.env.Memory() {
		var q int64
		read := func() error { w.mu.Lock(); q = w.stock[k]; w.mu.Unlock(); return nil }
		if w.approach == NaiveLock {
			_ = read() // cannot fail
		} else if err := w.gates[k].Do(lease.Token, read); err != nil {
			return Outcome{}, err // a fenced read raises the gate, so no older holder writes after it
		}
		w.env.Pause(ctx, rnd)
		if q < 1 {
			return Outcome{Rejected: true}, nil
		}
		write := func() error { w.mu.Lock(); w.stock[k] = q - 1; w.mu.Unlock(); return nil }
		if w.approach == NaiveLock {
			return Outcome{}, write()
		}
		return Outcome{}, w.gates[k].Do(lease.Token, write)
	}
	var q int64
	if err := twinRead(ctx, w.env, w.approach, w.fence, sku, lease, "quantity", &q); err != nil {
		return Outcome{}, err
	}
	w.env.Pause(ctx, rnd)
	if q < 1 {
		return Outcome{Rejected: true}, nil
	}
	if w.approach == NaiveLock {
		_, err := w.env.DB.Exec(ctx, `UPDATE inventory SET quantity = $1 WHERE sku = $2`, q-1, sku)
		return writeOutcome(err), nil
	}
	return writeOutcome(w.fence.Update(ctx, w.env.DB, sku, lease.Token, "quantity = $1", q-1)), nil
}

func (w *inventory) outcome(err, rejection error) Outcome {
	switch {
	case err == nil:
		return Outcome{}
	case rejection != nil && errors.Is(err, rejection):
		return Outcome{Rejected: true}
	}
	return writeOutcome(err)
}

func (w *inventory) Check(ctx context.Context) (int64, string, error) {
	final := make([]int64, len(w.keys))
	if w.env.Memory() {
		for i, k := range w.keys {
			if w.approach == Alternative {
				v, err := w.alt.(*lfatomic.Memory).Value(ctx, k)
				if err != nil {
					return 0, "", err
				}
				final[i] = v
			} else {
				w.mu.Lock()
				final[i] = w.stock[i]
				w.mu.Unlock()
			}
		}
	} else {
		rows, err := w.env.Admin.Query(ctx, `SELECT sku, quantity FROM inventory`)
		if err != nil {
			return 0, "", err
		}
		idx := map[string]int{}
		for i, k := range w.keys {
			idx[k] = i
		}
		for rows.Next() {
			var sku string
			var q int64
			if err := rows.Scan(&sku, &q); err != nil {
				return 0, "", err
			}
			final[idx[sku]] = q
		}
		if err := rows.Err(); err != nil {
			return 0, "", err
		}
	}
	var lost, phantom, negative int64
	for i := range w.keys {
		acc, unsure := w.accepted[i].Load(), w.unsure[i].Load()
		hi := inventoryStock - acc // every uncertain sale failed
		lo := hi - unsure          // every uncertain sale happened
		switch {
		case final[i] > hi:
			lost += final[i] - hi // acknowledged sales missing from the stock
		case final[i] < lo:
			phantom += lo - final[i] // stock gone without an acknowledged sale
		}
		if final[i] < 0 {
			negative++
		}
	}
	v := lost + phantom + negative
	if v == 0 {
		return 0, "", nil
	}
	return v, fmt.Sprintf("%d acknowledged sales lost (overwritten), %d units gone unaccounted, %d SKUs below zero", lost, phantom, negative), nil
}

// twinRead is the read of the lock twins' read-modify-write: a plain
// SELECT for the naive lock, a fenced read for the fenced lock — it raises
// the row's token, so no older holder can write between this read and this
// write.
func twinRead(ctx context.Context, env *Env, a Approach, f fencedlock.Fence, key string, lease fencedlock.Lease, column string, dest any) error {
	if a == NaiveLock {
		return env.DB.QueryRow(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE %s = $1", column, f.Table, f.Key), key).Scan(dest)
	}
	return f.Read(ctx, env.DB, key, lease.Token, column, dest)
}

// lockedOp runs critical under a lease of name: the fenced and naive twins
// share it. A lock held elsewhere is waited for; a fenced write is a
// rejection.
func lockedOp(ctx context.Context, env *Env, rnd *rand.Rand, name string,
	critical func(ctx context.Context, lease fencedlock.Lease) (Outcome, error)) Outcome {
	lease, err := fencedlock.AcquireWait(ctx, env.Locks, name, holderName(rnd), env.LeaseTTL,
		&fencedlock.WaitConfig{MinDelay: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond, Wakeups: wakeups(env.Locks)})
	if err != nil {
		return Outcome{Err: err}
	}
	out, err := critical(ctx, lease)
	relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), env.LeaseTTL*4)
	_ = env.Locks.Release(relCtx, lease) // an expired lease has nothing to release
	cancel()
	switch {
	case errors.Is(err, fencedlock.ErrFenced):
		return Outcome{Rejected: true}
	case err != nil:
		return Outcome{Err: err}
	}
	return out
}

func wakeups(s fencedlock.Store) fencedlock.Wakeups {
	w, _ := s.(fencedlock.Wakeups)
	return w
}

func holderName(rnd *rand.Rand) string { return "client-" + strconv.FormatUint(rnd.Uint64(), 36) }

// writeOutcome classifies the error of a write statement: nil, a fencing
// rejection, a certain failure (the server refused it, or it was never
// sent), or an uncertain one (it may have committed).
func writeOutcome(err error) Outcome {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return Outcome{}
	case errors.Is(err, fencedlock.ErrFenced):
		return Outcome{Rejected: true}
	case errors.As(err, &pgErr), pgconn.SafeToRetry(err):
		return Outcome{Err: err}
	}
	return Outcome{Err: err, Uncertain: true}
}

// errSkip tells Run that an approach does not exist on this backend.
var errSkip = errors.New("scenario: approach not available on this backend")
