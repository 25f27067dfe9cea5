package fencedlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

var (
	prefixInv   = attribute.String(telemetry.LockPrefix, "inv/")
	outAcquired = attribute.String(telemetry.Outcome, "acquired")
)

// A paused holder's write is rejected by the resource, and the rejection is
// counted: holder A acquires and stalls before its write (its keepalive does
// not renew, as in a paused process), its lease expires, B acquires and
// writes, and A resumes and presents its stale token to the gate.
func TestPausedHolderRejectionIsCounted(t *testing.T) {
	c := &clock.Manual{}
	store := newMemory(t, c)
	tel := telemetrytest.New(t)
	cfg := fencedlock.LockerConfig{TTL: time.Minute, LockPrefix: "inv/", MeterProvider: tel.Meters, TracerProvider: tel.Tracers,
		Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true}}
	cfgA, cfgB := cfg, cfg
	cfgA.Holder, cfgB.Holder = "a", "b"
	a, b := newLocker(t, store, &cfgA), newLocker(t, store, &cfgB)

	type paused struct{}
	reached, resume := make(chan struct{}), make(chan struct{})
	defer failpoint.Handle(failpoint.At("fencedlock.locker.acquired", failpoint.Call(func(ctx context.Context) {
		if ctx.Value(paused{}) != nil {
			close(reached)
			<-resume
		}
	})))()

	var gate fencedlock.Gate
	done := make(chan error, 1)
	go func() {
		done <- a.Do(context.WithValue(ctx, paused{}, true), "sku", func(_ context.Context, l fencedlock.Lease) error {
			return gate.Do(l.Token, func() error { return nil })
		})
	}()
	<-reached
	c.Advance(2 * time.Minute) // A's lease is over on the store's clock
	if err := b.Do(ctx, "sku", func(_ context.Context, l fencedlock.Lease) error {
		return gate.Do(l.Token, func() error { return nil })
	}); err != nil {
		t.Fatal(err)
	}
	close(resume)
	if err := <-done; !errors.Is(err, fencedlock.ErrFenced) {
		t.Fatalf("paused holder's write: %v, want ErrFenced", err)
	}

	if n := tel.Sum(t, "lockfree.fencedlock.fenced.rejections", prefixInv); n != 1 {
		t.Errorf("fenced rejections = %d, want 1\n%s", n, tel.Describe(t))
	}
	if n, _ := tel.Count(t, "lockfree.fencedlock.acquire.duration", prefixInv, outAcquired); n != 2 {
		t.Errorf("acquired attempts = %d, want 2\n%s", n, tel.Describe(t))
	}
	if n, _ := tel.Count(t, "lockfree.fencedlock.wait.duration", prefixInv, outAcquired); n != 2 {
		t.Errorf("waits = %d, want 2\n%s", n, tel.Describe(t))
	}
	spans := tel.SpansNamed("fencedlock.Do")
	if len(spans) != 2 {
		t.Fatalf("%d fencedlock.Do spans, want 2", len(spans))
	}
	var failed int
	for _, s := range spans {
		if name, _ := telemetrytest.Attr(s, telemetry.LockName); name.AsString() != "inv/sku" {
			t.Errorf("span lock name %q", name.AsString())
		}
		if tok, ok := telemetrytest.Attr(s, telemetry.LockToken); !ok || tok.AsInt64() <= 0 {
			t.Errorf("span has no token: %v", s.Attributes)
		}
		if s.Status.Code == codes.Error {
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("%d spans failed, want the paused holder's", failed)
	}
}

// Acquire outcomes: a free lock is acquired, a busy one is held (TryDo), a
// wait that ends with its context is canceled; a keepalive's renewals and
// the lease it loses are counted.
func TestLockerOutcomesAreCounted(t *testing.T) {
	t.Parallel()
	c := &clock.Manual{}
	store := newMemory(t, c)
	tel := telemetrytest.New(t)
	locker := newLocker(t, store, &fencedlock.LockerConfig{Holder: "a", TTL: time.Minute, LockPrefix: "inv/",
		MeterProvider: tel.Meters, Keepalive: &fencedlock.KeepaliveConfig{Interval: time.Millisecond}})
	if _, err := store.Acquire(ctx, "inv/busy", "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := locker.TryDo(ctx, "busy", func(context.Context, fencedlock.Lease) error { return nil }); !errors.Is(err, fencedlock.ErrHeld) {
		t.Fatalf("TryDo on a busy lock: %v", err)
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if err := locker.Do(short, "busy", func(context.Context, fencedlock.Lease) error { return nil }); err == nil {
		t.Fatal("Do with an ended context acquired a busy lock")
	}
	// Renewals go on until some are counted; then the lease is taken away
	// (expired on the store's clock, acquired by another holder): the next
	// renewal finds it lost and the work's context ends with ErrLost.
	err := locker.Do(ctx, "free", func(ctx context.Context, l fencedlock.Lease) error {
		waitFor(t, 30*time.Second, func() bool {
			return tel.Sum(t, "lockfree.fencedlock.renewals", attribute.String(telemetry.Outcome, "renewed")) >= 2
		})
		c.Advance(2 * time.Minute)
		if _, err := store.Acquire(ctx, "inv/free", "thief", time.Minute); err != nil {
			return err
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if !errors.Is(err, fencedlock.ErrLost) {
		t.Fatalf("work under a stolen lease ended with %v, want ErrLost", err)
	}
	want := map[string]uint64{"held": 1, "canceled": 1, "acquired": 1, "error": 0}
	for outcome, n := range want {
		if got, _ := tel.Count(t, "lockfree.fencedlock.acquire.duration", prefixInv, attribute.String(telemetry.Outcome, outcome)); got != n {
			t.Errorf("acquire outcome %s = %d, want %d\n%s", outcome, got, n, tel.Describe(t))
		}
	}
	if n, _ := tel.Count(t, "lockfree.fencedlock.wait.duration", attribute.String(telemetry.Outcome, "canceled")); n != 1 {
		t.Errorf("canceled waits = %d, want 1\n%s", n, tel.Describe(t))
	}
	if n := tel.Sum(t, "lockfree.fencedlock.renewals", attribute.String(telemetry.Outcome, "lost")); n != 1 {
		t.Errorf("lost renewals = %d, want 1\n%s", n, tel.Describe(t))
	}
	if n := tel.Sum(t, "lockfree.fencedlock.leases.lost", prefixInv, attribute.String(telemetry.Cause, "lost")); n != 1 {
		t.Errorf("leases lost = %d, want 1\n%s", n, tel.Describe(t))
	}
	if n := tel.Sum(t, "lockfree.fencedlock.fenced.rejections"); n != 0 {
		t.Errorf("fenced rejections = %d without a stale write", n)
	}
}

// spanOfQueries is a user's own pgx tracer: it notes the span each statement
// ran under.
type spanOfQueries struct {
	mu    sync.Mutex
	spans []trace.SpanID
}

func (s *spanOfQueries) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, trace.SpanContextFromContext(ctx).SpanID())
	return ctx
}

func (s *spanOfQueries) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A pgx tracer the user set on their pool keeps working beside lockfree's
// spans: it sees every statement, and the statements of Do run under Do's
// span.
func TestUserPgxTracerSeesStatementsUnderDo(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	user := &spanOfQueries{}
	cfg.ConnConfig.Tracer = user
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := fencedlock.NewPostgres(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	tel := telemetrytest.New(t)
	locker := newLocker(t, store, &fencedlock.LockerConfig{TracerProvider: tel.Tracers})
	if err := locker.Do(ctx, "traced", func(context.Context, fencedlock.Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	spans := tel.SpansNamed("fencedlock.Do")
	if len(spans) != 1 {
		t.Fatalf("%d fencedlock.Do spans, want 1", len(spans))
	}
	do := spans[0].SpanContext.SpanID()
	user.mu.Lock()
	defer user.mu.Unlock()
	if len(user.spans) < 2 { // the acquire and the release
		t.Fatalf("the user's tracer saw %d statements, want the acquire and the release", len(user.spans))
	}
	for i, id := range user.spans {
		if id != do {
			t.Errorf("statement %d ran under span %v, not Do's %v", i, id, do)
		}
	}
}
