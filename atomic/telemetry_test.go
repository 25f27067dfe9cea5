package atomic_test

import (
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
)

func opOutcome(op, outcome string) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String(telemetry.Operation, op), attribute.String(telemetry.Outcome, outcome)}
}

// Every operation is counted once with the outcome its error says; a
// refusal is not a failed span.
func TestOperationsAreCountedByOutcome(t *testing.T) {
	t.Parallel()
	tel := telemetrytest.New(t)
	s, err := atomic.NewMemory(&atomic.MemoryConfig{MeterProvider: tel.Meters, TracerProvider: tel.Tracers})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Claim(ctx, "sku", 3); err != nil {
		t.Fatal(err)
	}
	_ = s.Claim(ctx, "sku", 3)                              // conflict
	_, _ = s.Decrement(ctx, "sku", 2)                       // applied
	_, _ = s.Decrement(ctx, "sku", 2)                       // insufficient
	_, _ = s.Decrement(ctx, "sku", 0)                       // invalid
	_, _ = s.Increment(ctx, "none", 1, atomic.NoCap)        // not found
	_ = s.CompareAndSet(ctx, "sku", 7, 8)                   // conflict
	_, _ = s.DecrementMany(ctx, map[string]int64{"sku": 1}) // applied
	want := map[[2]string]int64{
		{"claim", "applied"}: 1, {"claim", "conflict"}: 1,
		{"decrement", "applied"}: 1, {"decrement", "insufficient"}: 1, {"decrement", "invalid"}: 1,
		{"increment", "not_found"}: 1, {"compare_and_set", "conflict"}: 1, {"decrement_many", "applied"}: 1,
	}
	for k, n := range want {
		if got := tel.Sum(t, "lockfree.atomic.operations", opOutcome(k[0], k[1])...); got != n {
			t.Errorf("%s/%s = %d, want %d\n%s", k[0], k[1], got, n, tel.Describe(t))
		}
	}
	if got := tel.Sum(t, "lockfree.atomic.operations"); got != 8 {
		t.Errorf("%d operations counted, want 8", got)
	}
	for _, sp := range tel.Spans() {
		if sp.Status.Code != 0 {
			t.Errorf("span %s failed (%v) for a refusal", sp.Name, sp.Status)
		}
	}
}

// The fenced twin paused between its fenced read and its write past its
// lease: another holder decrements, and the paused write is rejected by the
// fence. The rejection is counted twice over: as the twin's decrement with
// outcome fenced, and as fencedlock's fenced rejection.
func TestPausedTwinRejectionIsCounted(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	tel := telemetrytest.New(t)
	table := inventory
	table.MeterProvider = tel.Meters
	if err := newPostgres(t, db.Pool, inventory).Claim(ctx, "sku", 10); err != nil {
		t.Fatal(err)
	}
	c := &clock.Manual{}
	twin := newFenced(t, memoryLocks(c), db.Pool, table, &atomic.FencedConfig{
		LockerConfig: fencedlock.LockerConfig{TTL: time.Minute, MeterProvider: tel.Meters}})
	pctx, paused, resume := pauseAt(ctx)
	defer resume()
	done := make(chan error, 1)
	go func() { _, err := twin.Decrement(pctx, "sku", 1); done <- err }()
	<-paused
	c.Advance(2 * time.Minute) // the paused holder's lease is over
	if _, err := twin.Decrement(ctx, "sku", 1); err != nil {
		t.Fatal(err)
	}
	resume()
	if err := <-done; !errors.Is(err, fencedlock.ErrFenced) {
		t.Fatalf("the paused twin's decrement: %v, want ErrFenced", err)
	}
	if n := tel.Sum(t, "lockfree.atomic.operations", opOutcome("decrement", "fenced")...); n != 1 {
		t.Errorf("fenced decrements = %d, want 1\n%s", n, tel.Describe(t))
	}
	if n := tel.Sum(t, "lockfree.fencedlock.fenced.rejections", attribute.String(telemetry.LockPrefix, "atomic/"+inventory.Name+"/")); n != 1 {
		t.Errorf("fencedlock rejections = %d, want 1\n%s", n, tel.Describe(t))
	}
	if v, err := newPostgres(t, db.Pool, inventory).Value(ctx, "sku"); err != nil || v != 9 {
		t.Fatalf("value %d (%v), want 9: only the current holder's decrement lands", v, err)
	}
}
