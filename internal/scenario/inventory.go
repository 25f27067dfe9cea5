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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	lfatomic "github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// inventoryStock is each SKU's initial quantity: large enough that a run
// does not sell out, so every lost or phantom sale shows in the arithmetic.
const inventoryStock = 10_000_000

// The statements of the inventory scenario that are the harness's own.
const (
	sqlInventoryTable = `CREATE TABLE inventory (
	sku           text   PRIMARY KEY,
	quantity      bigint NOT NULL,
	fencing_token bigint NOT NULL DEFAULT 0
)`
	sqlInventorySeed = `INSERT INTO inventory (sku, quantity)
	SELECT 'sku-' || i, $1 FROM generate_series(0, $2 - 1) AS i`
	sqlInventoryFinal = `SELECT sku, quantity FROM inventory`

	// sqlInventoryRaw is the least a sale can be with atomic.Decrement's
	// effect — take one unit if there is one, and say what is left — in one
	// statement.
	sqlInventoryRaw = `UPDATE inventory SET quantity = quantity - 1 WHERE sku = $1 AND quantity >= 1 RETURNING quantity`

	// The naive lock's read and write are atomic.Fenced's (as
	// fencedlock.Fence renders them) without their token conditions: the
	// read still stamps the row, the write still sets the token, neither
	// checks it, so that the pair differs in the fence alone.
	sqlInventoryNaiveRead  = `UPDATE "inventory" SET "fencing_token" = $2 WHERE "sku" = $1 RETURNING "quantity"`
	sqlInventoryNaiveWrite = `UPDATE "inventory" SET "quantity" = $1, "fencing_token" = $3 WHERE "sku" = $2`
)

// inventoryLockPrefix prefixes the SKU in the twins' lock names: the fenced
// twin's default, which the naive lock shares.
const inventoryLockPrefix = "atomic/inventory/"

func init() {
	register(Scenario{
		Name:        "inventory",
		Description: "clients sell one unit of a random SKU; stock never goes below zero and final = initial − accepted",
		Approaches:  []Approach{Alternative, FencedLock, NaiveLock, Raw},
		Labels: map[Approach]string{
			Alternative: "atomic.Decrement: one UPDATE … WHERE quantity >= 1 RETURNING quantity (a refusal adds a SELECT)",
			FencedLock:  "atomic.Fenced on fencedlock.Locker: acquire, fenced read (stamps the token, returns quantity), check, fenced write, release",
			NaiveLock:   "the same Locker and statements without the token conditions: acquire, read, check, write, release",
			Raw:         "the minimal statement: the same UPDATE … WHERE quantity >= 1 RETURNING quantity through pgx",
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

	alt    lfatomic.Store     // the alternative
	fenced *lfatomic.Fenced   // the fenced lock on PostgreSQL
	locker *fencedlock.Locker // the naive lock, and both twins in memory
	// the stock of the twins in memory
	mu    sync.Mutex
	stock []int64
	gates []fencedlock.Gate
}

func newInventory(ctx context.Context, env *Env, a Approach) (Workload, error) {
	if env.Memory() && a == Raw {
		return nil, errSkip
	}
	w := &inventory{env: env, approach: a}
	for i := 0; i < env.Keys; i++ {
		w.keys = append(w.keys, "sku-"+strconv.Itoa(i))
	}
	w.accepted = make([]atomic.Int64, env.Keys)
	w.unsure = make([]atomic.Int64, env.Keys)
	if err := w.seed(ctx); err != nil {
		return nil, err
	}
	if a != FencedLock && a != NaiveLock {
		return w, nil
	}
	locks, cfg, err := inventoryLocking(env)
	if err != nil {
		return nil, err
	}
	if a == FencedLock && !env.Memory() {
		table := lfatomic.Table{Name: "inventory", Key: "sku", Value: "quantity"}
		w.fenced, err = lfatomic.NewFenced(locks, env.DB, table, &lfatomic.FencedConfig{LockerConfig: cfg})
		return w, err
	}
	w.locker, err = fencedlock.NewLocker(locks, &cfg)
	return w, err
}

// inventoryLocking returns the lock store and the Locker configuration that
// both twins use.
func inventoryLocking(env *Env) (fencedlock.Store, fencedlock.LockerConfig, error) {
	cfg := fencedlock.LockerConfig{
		TTL:        env.LeaseTTL,
		LockPrefix: inventoryLockPrefix,
		Wait:       &fencedlock.WaitConfig{MinDelay: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond},
		// One lease, not renewed: the pause fault stalls one goroutine,
		// whose keepalive would go on renewing the lease, where a stopped
		// process renews nothing.
		Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true},
	}
	if env.Memory() {
		return env.Locks, cfg, nil
	}
	// Waiters are woken by NOTIFY on release, not by polling alone.
	locks, err := fencedlock.NewPostgres(env.DB, &fencedlock.PostgresConfig{Notify: true})
	return locks, cfg, err
}

// seed creates every SKU with inventoryStock units, and the alternative's
// store.
func (w *inventory) seed(ctx context.Context) error {
	if w.env.Memory() {
		m, err := lfatomic.NewMemory(nil)
		if err != nil {
			return err
		}
		for _, k := range w.keys {
			if err := m.Claim(ctx, k, inventoryStock); err != nil {
				return err
			}
		}
		w.alt = m
		w.stock = make([]int64, w.env.Keys)
		for i := range w.stock {
			w.stock[i] = inventoryStock
		}
		w.gates = make([]fencedlock.Gate, w.env.Keys)
		return nil
	}
	if _, err := w.env.Admin.Exec(ctx, sqlInventoryTable); err != nil {
		return err
	}
	if _, err := w.env.Admin.Exec(ctx, sqlInventorySeed, inventoryStock, w.env.Keys); err != nil {
		return err
	}
	alt, err := lfatomic.NewPostgres(w.env.DB, lfatomic.Table{Name: "inventory", Key: "sku", Value: "quantity"})
	w.alt = alt
	return err
}

func (w *inventory) Op(ctx context.Context, client int, rnd *rand.Rand) Outcome {
	k := rnd.IntN(len(w.keys))
	var out Outcome
	switch {
	case w.approach == Alternative:
		w.env.Pause(ctx, rnd) // no read-write gap to pause in: the check is in the statement
		_, err := w.alt.Decrement(ctx, w.keys[k], 1)
		out = saleOutcome(err, true)
	case w.approach == Raw:
		w.env.Pause(ctx, rnd)
		var left int64
		err := w.env.DB.QueryRow(ctx, sqlInventoryRaw, w.keys[k]).Scan(&left)
		if errors.Is(err, pgx.ErrNoRows) {
			return Outcome{Rejected: true} // every SKU exists: the floor refused it
		}
		out = writeOutcome(err)
	case w.fenced != nil:
		out = w.fencedSale(ctx, rnd, k)
	default:
		out = w.lockedSale(ctx, k, func(lease fencedlock.Lease) Outcome {
			if w.env.Memory() {
				return w.memorySale(ctx, rnd, k, lease)
			}
			return w.naiveSale(ctx, rnd, k, lease)
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

// saleOutcome classifies the error of a sale: a refusal for want of stock
// or by the fence is a rejection; otherwise, a sale that sent its write
// may have happened (writeOutcome), one that did not certainly did not.
func saleOutcome(err error, wrote bool) Outcome {
	switch {
	case err == nil:
		return Outcome{}
	case errors.Is(err, lfatomic.ErrInsufficient), errors.Is(err, fencedlock.ErrFenced):
		return Outcome{Rejected: true}
	case !wrote:
		return Outcome{Err: err}
	}
	return writeOutcome(err)
}

// fencedSale sells one unit of SKU k with the fenced twin, pausing (under
// the pause fault) at its inject point between the fenced read and the
// fenced write.
func (w *inventory) fencedSale(ctx context.Context, rnd *rand.Rand, k int) Outcome {
	ctx, at := pauseAt(ctx, w.env, rnd, "atomic.fenced.before-write")
	_, err := w.fenced.Decrement(ctx, w.keys[k], 1)
	return saleOutcome(err, at.reached)
}

// lockedSale runs sale under the lease of SKU k: the naive lock's flow,
// and both twins' in memory. A sale that could not take the lock certainly
// did not happen; once it ran, a failed release changes nothing.
func (w *inventory) lockedSale(ctx context.Context, k int, sale func(lease fencedlock.Lease) Outcome) Outcome {
	var (
		out Outcome
		ran bool
	)
	err := w.locker.Do(ctx, w.keys[k], func(_ context.Context, lease fencedlock.Lease) error {
		ran, out = true, sale(lease)
		return out.Err
	})
	if !ran {
		return Outcome{Err: err}
	}
	return out
}

// naiveSale is the naive lock's critical section on PostgreSQL: the fenced
// twin's read, check and write, with no token condition.
func (w *inventory) naiveSale(ctx context.Context, rnd *rand.Rand, k int, lease fencedlock.Lease) Outcome {
	var q int64
	if err := w.env.DB.QueryRow(ctx, sqlInventoryNaiveRead, w.keys[k], lease.Token).Scan(&q); err != nil {
		return Outcome{Err: err} // the read changes no stock
	}
	if q < 1 {
		return Outcome{Rejected: true}
	}
	w.env.Pause(ctx, rnd) // where the fenced twin has its inject point
	_, err := w.env.DB.Exec(ctx, sqlInventoryNaiveWrite, q-1, w.keys[k], lease.Token)
	return writeOutcome(err)
}

// memorySale is the twins' critical section in memory: read, check,
// (pause), write — through SKU k's Gate for the fenced lock. A fenced read
// raises the gate, so no older holder writes after it.
func (w *inventory) memorySale(ctx context.Context, rnd *rand.Rand, k int, lease fencedlock.Lease) Outcome {
	fenced := w.approach == FencedLock
	var q int64
	read := func() error { w.mu.Lock(); q = w.stock[k]; w.mu.Unlock(); return nil }
	if !fenced {
		_ = read() // cannot fail
	} else if err := w.gates[k].Do(lease.Token, read); err != nil {
		return writeOutcome(err)
	}
	if q < 1 {
		return Outcome{Rejected: true}
	}
	w.env.Pause(ctx, rnd)
	write := func() error { w.mu.Lock(); w.stock[k] = q - 1; w.mu.Unlock(); return nil }
	if !fenced {
		return writeOutcome(write())
	}
	return writeOutcome(w.gates[k].Do(lease.Token, write))
}

func (w *inventory) Check(ctx context.Context) (int64, string, error) {
	final, err := w.final(ctx)
	if err != nil {
		return 0, "", err
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

// final returns every SKU's stock at the end of a run.
func (w *inventory) final(ctx context.Context) ([]int64, error) {
	final := make([]int64, len(w.keys))
	if w.env.Memory() {
		for i, k := range w.keys {
			if w.approach != Alternative {
				w.mu.Lock()
				final[i] = w.stock[i]
				w.mu.Unlock()
				continue
			}
			v, err := w.alt.Value(ctx, k)
			if err != nil {
				return nil, err
			}
			final[i] = v
		}
		return final, nil
	}
	idx := make(map[string]int, len(w.keys))
	for i, k := range w.keys {
		idx[k] = i
	}
	rows, err := w.env.Admin.Query(ctx, sqlInventoryFinal)
	if err != nil {
		return nil, err
	}
	var (
		sku string
		q   int64
	)
	_, err = pgx.ForEachRow(rows, []any{&sku, &q}, func() error {
		final[idx[sku]] = q
		return nil
	})
	return final, err
}

// pausePoint is what an operation carries in its ctx to the inject point
// of the library code it calls: the harness's handler runs Env.Pause there
// — the pause fault at that instruction — and notes that the operation got
// that far.
type pausePoint struct {
	env     *Env
	rnd     *rand.Rand
	point   string
	reached bool // set on the operation's own goroutine
}

type pausePointKey struct{}

var installPauseHandler sync.Once

// pauseAt returns ctx carrying a pausePoint at the inject point name, and
// installs, once per process, the handler that honours it. The handler acts
// only on operations whose ctx carries a pausePoint for the point reached,
// so it leaves every other caller of the library alone.
func pauseAt(ctx context.Context, env *Env, rnd *rand.Rand, name string) (context.Context, *pausePoint) {
	installPauseHandler.Do(func() {
		failpoint.Handle(func(ctx context.Context, name string) {
			if p, ok := ctx.Value(pausePointKey{}).(*pausePoint); ok && p.point == name {
				p.reached = true
				p.env.Pause(ctx, p.rnd)
			}
		})
	})
	p := &pausePoint{env: env, rnd: rnd, point: name}
	return context.WithValue(ctx, pausePointKey{}, p), p
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
