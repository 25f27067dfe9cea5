package atomic_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	lfatomic "github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
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

func (g *gate) DecrementInOrder(ctx context.Context, key string, amounts []int64) ([]lfatomic.Result, error) {
	first := g.held.CompareAndSwap(false, true)
	if first && !g.after {
		close(g.entered)
		<-g.release
	}
	r, err := g.InOrder.DecrementInOrder(ctx, key, amounts)
	if first && g.after {
		close(g.entered)
		<-g.release
	}
	return r, err
}

// result is what one Coalescer.Decrement returned.
type result struct {
	value int64
	err   error
}

// decrement runs c.Decrement on its own goroutine and returns where its
// result arrives.
func decrement(ctx context.Context, c *lfatomic.Coalescer, key string, amount int64) <-chan result {
	out := make(chan result, 1)
	go func() {
		v, err := c.Decrement(ctx, key, amount)
		out <- result{v, err}
	}()
	return out
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

// serial is what decrements of amounts from initial (floor 0) answer one
// after another: the value after each that applies, or the value it was
// refused on.
func serial(initial int64, amounts []int64) (out []result, final int64) {
	v := initial
	for _, a := range amounts {
		if v >= a {
			v -= a
			out = append(out, result{value: v})
			continue
		}
		out = append(out, result{value: v, err: lfatomic.ErrInsufficient})
	}
	return out, v
}

// same reports whether got is the serial answer want: applied with the
// same value, or refused (an *InsufficientError) on the same value.
func same(got, want result) bool {
	if want.err == nil {
		return got.err == nil && got.value == want.value
	}
	var short *lfatomic.InsufficientError
	return errors.As(got.err, &short) && short.Actual == want.value
}

// permutations returns every distinct order of xs.
func permutations(xs []int64) [][]int64 {
	if len(xs) <= 1 {
		return [][]int64{slices.Clone(xs)}
	}
	var out [][]int64
	for i := range xs {
		if slices.Contains(xs[:i], xs[i]) {
			continue // the same amount first again: the same orders
		}
		rest := slices.Concat(xs[:i], xs[i+1:])
		for _, p := range permutations(rest) {
			out = append(out, append([]int64{xs[i]}, p...))
		}
	}
	return out
}

// checkCoalescerSerial guards the Coalescer's serial equivalence: for every
// order of arrival of a few decrements of one key that cannot all be served,
// each caller gets what a serial execution in arrival order gives it, and
// the key ends where that execution leaves it. A first decrement holds its
// step at a gate, so that the others queue behind it in a known order and
// go in one step.
func checkCoalescerSerial(t *testing.T, s inOrderStore) error {
	const initial = 5
	for n, order := range permutations([]int64{3, 1, 2, 2}) {
		key := fmt.Sprintf("serial-%d", n)
		claim(t, s, key, initial)
		g := newGate(s, false)
		c := newCoalescer(t, g)
		amounts := append([]int64{1}, order...)
		outs := []<-chan result{decrement(ctx, c, key, 1)}
		<-g.entered
		for i, a := range order {
			outs = append(outs, decrement(ctx, c, key, a))
			waitUntil(t, "the decrement to queue", func() bool { return c.Waiting(key) == i+1 })
		}
		close(g.release)
		want, final := serial(initial, amounts)
		for i, out := range outs {
			if got := <-out; !same(got, want[i]) {
				return fmt.Errorf("arrival order %v: decrement %d (of %d) got %d, %v; a serial execution in arrival order gives %d, %v",
					amounts, i, amounts[i], got.value, got.err, want[i].value, want[i].err)
			}
		}
		if v, err := s.Value(ctx, key); err != nil || v != final {
			return fmt.Errorf("arrival order %v: value %d, %v; a serial execution leaves %d", amounts, v, err, final)
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
	waitUntil(t, "b to queue", func() bool { return c.Waiting(key) == 1 })
	bcancel()
	rb := <-b
	close(g.release)
	waitUntil(t, "the key's steps to end", func() bool { return c.Waiting(key) == 0 })
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
		waitUntil(t, "the decrement to queue", func() bool { return c.Waiting(key) == i+1 })
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
		waitUntil(t, "the decrement to queue", func() bool { return c.Waiting(key) == i+1 })
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
