package atomic_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	lfatomic "github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
)

// inOrderStore is a store a Coalescer runs on: Store to seed and read the
// key, InOrder for its steps.
type inOrderStore interface {
	lfatomic.Store
	lfatomic.InOrder
}

var inOrderKinds = map[string]func(t *testing.T) inOrderStore{
	"memory":   func(t *testing.T) inOrderStore { return newMemory(t, 0) },
	"postgres": func(t *testing.T) inOrderStore { return newPostgres(t, newTable(t).Pool, inventory) },
}

func newCoalescer(t testing.TB, s lfatomic.InOrder) *lfatomic.Coalescer {
	t.Helper()
	c, err := lfatomic.NewCoalescer(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// gate holds the first step of its Coalescer: before it reaches the store,
// or (after) once the store has applied it, until release is closed. Later
// steps pass.
type gate struct {
	lfatomic.InOrder
	after   bool
	held    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newGate(s lfatomic.InOrder, after bool) *gate {
	return &gate{InOrder: s, after: after, entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) ApplyInOrder(ctx context.Context, ops []lfatomic.Op) ([]lfatomic.Result, error) {
	first := g.held.CompareAndSwap(false, true)
	if first && !g.after {
		close(g.entered)
		<-g.release
	}
	r, err := g.InOrder.ApplyInOrder(ctx, ops)
	if first && g.after {
		close(g.entered)
		<-g.release
	}
	return r, err
}

// result is what one Coalescer call returned.
type result struct {
	value  int64
	values map[string]int64
	err    error
}

// apply runs c.Apply on its own goroutine and returns where its result
// arrives.
func apply(ctx context.Context, c *lfatomic.Coalescer, op lfatomic.Op) <-chan result {
	out := make(chan result, 1)
	go func() {
		r := c.Apply(ctx, op)
		out <- result{r.Value, r.Values, r.Err}
	}()
	return out
}

// decrement runs c.Decrement on its own goroutine and returns where its
// result arrives.
func decrement(ctx context.Context, c *lfatomic.Coalescer, key string, amount int64) <-chan result {
	return apply(ctx, c, lfatomic.DecrementOp(key, amount))
}

// waitUntil polls cond until it holds, for at most 2 minutes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 2 minutes for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// call is one caller's operation on an item and its case, as the oracle
// knows it: what it does to their values (floor 0), and the Op the
// Coalescer sends.
type call struct {
	name string
	op   func(item, box string) lfatomic.Op
	// apply returns the values after the call and whether it applied.
	apply func(item, box int64) (int64, int64, bool)
	// refusal is the error a refusal matches.
	refusal error
	many    bool // a DecrementManyOp: its result is both values
}

func decrementCall(a int64) call {
	return call{name: fmt.Sprint("decrement ", a), op: func(k, _ string) lfatomic.Op { return lfatomic.DecrementOp(k, a) },
		apply: func(v, b int64) (int64, int64, bool) { return v - a, b, v >= a }, refusal: lfatomic.ErrInsufficient}
}

// calls are operations whose conditions hold or fail depending on the order
// they meet each other in, from 4 items and 1 case: each one's condition
// fails in some order and holds in another; the basket is refused for want
// of items with a case to take.
var calls = []call{
	decrementCall(3),
	{"increment 4 cap 6", func(k, _ string) lfatomic.Op { return lfatomic.IncrementOp(k, 4, 6) },
		func(v, b int64) (int64, int64, bool) { return v + 4, b, v+4 <= 6 }, lfatomic.ErrInsufficient, false},
	{"compare-and-set 1 → 5", func(k, _ string) lfatomic.Op { return lfatomic.CompareAndSetOp(k, 1, 5) },
		func(v, b int64) (int64, int64, bool) { return 5, b, v == 1 }, lfatomic.ErrConflict, false},
	{"set-if-greater 3", func(k, _ string) lfatomic.Op { return lfatomic.SetIfGreaterOp(k, 3) },
		func(v, b int64) (int64, int64, bool) { return 3, b, 3 > v }, lfatomic.ErrConflict, false},
	{"basket of 2 items and a case", func(k, c string) lfatomic.Op { return lfatomic.DecrementManyOp(map[string]int64{k: 2, c: 1}) },
		func(v, b int64) (int64, int64, bool) { return v - 2, b - 1, v >= 2 && b >= 1 }, lfatomic.ErrInsufficient, true},
}

// serial is what the calls answer one after another from (item, box): the
// values after each that applies, or the value it was refused on.
func serial(item, box string, v, b int64, cs []call) (out []result, finalItem, finalBox int64) {
	for _, c := range cs {
		nv, nb, ok := c.apply(v, b)
		switch {
		case ok && c.many:
			v, b = nv, nb
			out = append(out, result{values: map[string]int64{item: v, box: b}})
		case ok:
			v, b = nv, nb
			out = append(out, result{value: v})
		case c.many:
			out = append(out, result{err: c.refusal})
		default:
			out = append(out, result{value: v, err: c.refusal})
		}
	}
	return out, v, b
}

// same reports whether got is the serial answer want: applied with the
// same values, or refused (the same error) on the same value.
func same(got, want result) bool {
	if got.value != want.value || !maps.Equal(got.values, want.values) {
		return false
	}
	if want.err == nil {
		return got.err == nil
	}
	return errors.Is(got.err, want.err)
}

// permutations returns every order of cs.
func permutations(cs []call) [][]call {
	if len(cs) <= 1 {
		return [][]call{slices.Clone(cs)}
	}
	var out [][]call
	for i := range cs {
		for _, p := range permutations(slices.Concat(cs[:i], cs[i+1:])) {
			out = append(out, append([]call{cs[i]}, p...))
		}
	}
	return out
}

// checkCoalescerSerial guards the Coalescer's serial equivalence and the
// conditions of a step: for every order of arrival of a few operations of
// an item and its case — decrements, an increment, a compare-and-set, a
// set-if-greater, a basket of both — each caller gets what a serial
// execution in arrival order gives it, and the keys end where that
// execution leaves them. A first decrement holds its step at a gate, so
// that the others queue behind it in a known order and go in one step.
func checkCoalescerSerial(t *testing.T, s inOrderStore) error {
	const initial, box = 5, 1
	for n, order := range permutations(calls) {
		item, boxKey := fmt.Sprintf("serial-%d", n), fmt.Sprintf("serial-%d-case", n)
		claim(t, s, item, initial)
		claim(t, s, boxKey, box)
		g := newGate(s, false)
		c := newCoalescer(t, g)
		all := append([]call{decrementCall(1)}, order...)
		outs := []<-chan result{apply(ctx, c, all[0].op(item, boxKey))}
		<-g.entered
		for i, o := range order {
			outs = append(outs, apply(ctx, c, o.op(item, boxKey)))
			waitUntil(t, "the operation to queue", func() bool { return c.Waiting() == i+1 })
		}
		close(g.release)
		want, finalItem, finalBox := serial(item, boxKey, initial, box, all)
		names := make([]string, len(all))
		for i, o := range all {
			names[i] = o.name
		}
		for i, out := range outs {
			if got := <-out; !same(got, want[i]) {
				return fmt.Errorf("arrival order %q: %s got %d %v, %v; a serial execution in arrival order gives %d %v, %v",
					names, names[i], got.value, got.values, got.err, want[i].value, want[i].values, want[i].err)
			}
		}
		for k, final := range map[string]int64{item: finalItem, boxKey: finalBox} {
			if v, err := s.Value(ctx, k); err != nil || v != final {
				return fmt.Errorf("arrival order %q: %s %d, %v; a serial execution leaves %d", names, k, v, err, final)
			}
		}
	}
	return nil
}

// checkCoalescerInFlight guards what a caller that gives up is told. One
// whose context ends while its step runs (applied, its answer held at the
// gate) must hear ErrUncertain, not "not applied"; one whose context ends
// while it waits for a step is never sent.
func checkCoalescerInFlight(t *testing.T, s inOrderStore) error {
	const key = "in-flight"
	claim(t, s, key, 10)
	g := newGate(s, true)
	c := newCoalescer(t, g)
	actx, acancel := context.WithCancel(ctx)
	a := decrement(actx, c, key, 2)
	<-g.entered // a's step applied; its answer waits
	acancel()
	ra := <-a
	bctx, bcancel := context.WithCancel(ctx)
	b := decrement(bctx, c, key, 3)
	waitUntil(t, "b to queue", func() bool { return c.Waiting() == 1 })
	bcancel()
	rb := <-b
	close(g.release)
	waitUntil(t, "the key's steps to end", func() bool { return c.Waiting() == 0 })
	v, err := s.Value(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(rb.err, context.Canceled) || errors.Is(rb.err, lfatomic.ErrUncertain) {
		t.Fatalf("b, cancelled before it was sent: %v, want context.Canceled alone", rb.err)
	}
	if v != 8 {
		t.Fatalf("value %d, want 8: a's 2 applied, b's 3 never sent", v)
	}
	if !errors.Is(ra.err, lfatomic.ErrUncertain) {
		return fmt.Errorf("a, cancelled while its step ran, was told %d, %v: not that its outcome is unknown, yet its 2 applied (value %d)", ra.value, ra.err, v)
	}
	if !errors.Is(ra.err, context.Canceled) {
		t.Fatalf("a: %v, want it to carry context.Canceled", ra.err)
	}
	return nil
}

// checkCoalescerLostReply guards the outcome of a step whose answer is lost
// after it committed: a fault proxy resets the connection as the answer
// comes back. Every caller of that step must hear ErrUncertain — none a
// success, none "not applied" — and the step applies once.
func checkCoalescerLostReply(t *testing.T) error {
	db := newTable(t)
	target, err := pgaddr.HostPort(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	through, err := pgaddr.WithHostPort(db.URL, proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, through)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const key = "lost-batch"
	direct := newPostgres(t, db.Pool, inventory)
	claim(t, direct, key, 100)
	c := newCoalescer(t, newPostgres(t, pool, inventory))
	// A transaction holds the row: the first step waits for it in the
	// database, and the next callers queue for the second step.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var txPID int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&txPID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT FROM "Inventory ""stock""" WHERE sku = $1 FOR UPDATE`, key); err != nil {
		t.Fatal(err)
	}
	first := decrement(ctx, c, key, 1)
	waitUntil(t, "the first step to wait for the row", func() bool {
		var waiting bool
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, txPID).Scan(&waiting)
		return waiting
	})
	var outs []<-chan result
	for i := range 4 {
		outs = append(outs, decrement(ctx, c, key, int64(i+1)))
		waitUntil(t, "the decrement to queue", func() bool { return c.Waiting() == i+1 })
	}
	lost := proxy.Stats().LostReplies
	proxy.LoseReply([]byte(key)) // the second step's Bind carries the key
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-first; r.err != nil || r.value != 99 {
		t.Fatalf("first step: %d, %v; want 99", r.value, r.err)
	}
	var errs []error
	for _, out := range outs {
		errs = append(errs, (<-out).err)
	}
	if n := proxy.Stats().LostReplies; n != lost+1 {
		t.Fatalf("%d answers lost, want 1: the fault did not bite", n-lost)
	}
	v, err := direct.Value(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if v != 89 {
		t.Fatalf("value %d, want 89: the second step (1+2+3+4) applied once", v)
	}
	for i, err := range errs {
		if !errors.Is(err, lfatomic.ErrUncertain) {
			return fmt.Errorf("caller %d of the step whose answer was lost was told %v, not that its outcome is unknown; it applied (value %d)", i, err, v)
		}
	}
	return nil
}

// A step that fails in the database rolls back: its backend is terminated
// while it waits for the row, twice (the first caller's step, then the
// step of the callers queued behind it). Nobody is told it applied, each is
// told it did not (the server said so), and the key is unchanged.
func TestCoalescerStepTerminated(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	const key = "terminated"
	store := newPostgres(t, db.Pool, inventory)
	claim(t, store, key, 100)
	c := newCoalescer(t, store)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var txPID int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&txPID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT FROM "Inventory ""stock""" WHERE sku = $1 FOR UPDATE`, key); err != nil {
		t.Fatal(err)
	}
	// terminateWaiter terminates the session that waits for the row,
	// other than the one it terminated before (which may still show).
	var terminated int
	terminateWaiter := func() {
		t.Helper()
		var pid int
		waitUntil(t, "a step to wait for the row", func() bool {
			return db.Pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)) AND pid <> $2`,
				txPID, terminated).Scan(&pid) == nil
		})
		if _, err := db.Pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Fatal(err)
		}
		terminated = pid
	}
	outs := []<-chan result{decrement(ctx, c, key, 1)}
	waitUntil(t, "the first step to be sent", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, txPID).Scan(&n)
		return n == 1
	})
	for i := range 3 {
		outs = append(outs, decrement(ctx, c, key, int64(i+1)))
		waitUntil(t, "the decrement to queue", func() bool { return c.Waiting() == i+1 })
	}
	terminateWaiter() // the first step
	terminateWaiter() // the step of the three queued behind it
	for i, out := range outs {
		r := <-out
		if r.err == nil {
			t.Errorf("caller %d was told %d: applied, by a step that was terminated", i, r.value)
		} else if errors.Is(r.err, lfatomic.ErrUncertain) {
			t.Errorf("caller %d: %v; the server ended the step, so it did not apply", i, r.err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := store.Value(ctx, key); err != nil || v != 100 {
		t.Fatalf("value %d, %v; want 100: no step applied", v, err)
	}
}

// ApplyInOrder's fold is a function of atomic.Migrations, found under the
// Table's Tables. Without it, a step is refused with an error that says
// what to apply, not ErrUncertain, and nothing applies.
func TestApplyInOrderNeedsMigrations(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	if _, err := db.Pool.Exec(ctx, inventoryDDL); err != nil {
		t.Fatal(err)
	}
	shop := inventory
	shop.Tables = migrate.Names{Prefix: "shop_"}
	if err := migrate.Up(ctx, db.Pool, shop.Tables, lfatomic.Migrations()); err != nil {
		t.Fatal(err)
	}
	const key = "unmigrated"
	migrated := newPostgres(t, db.Pool, shop)
	claim(t, migrated, key, 10)
	bare := newPostgres(t, db.Pool, inventory) // its Tables: the default prefix, not migrated
	_, err := bare.ApplyInOrder(ctx, []lfatomic.Op{lfatomic.DecrementOp(key, 1)})
	if err == nil || errors.Is(err, lfatomic.ErrUncertain) || !strings.Contains(err.Error(), "apply atomic.Migrations") {
		t.Fatalf("a step without the fold: %v; want an error that names atomic.Migrations", err)
	}
	got, err := migrated.ApplyInOrder(ctx, []lfatomic.Op{lfatomic.DecrementOp(key, 1)})
	if err != nil || got[0].Err != nil || got[0].Value != 9 {
		t.Fatalf("a step with the fold under the prefix shop_: %+v, %v; want 9", got, err)
	}
}
