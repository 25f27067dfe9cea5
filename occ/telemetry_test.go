package occ_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/occ/occtest"
)

// A writer paused between its read and its write (the inject point
// occ.update.before-write) while another writer updates the row conflicts,
// re-reads and applies: the metrics count three attempts, one conflict and
// one retry delay, and no give-up; the span of the paused Update says it
// took two attempts.
func TestPausedWriterConflictIsCounted(t *testing.T) {
	tel := telemetrytest.New(t)
	cfg := occtest.Config
	cfg.MeterProvider, cfg.TracerProvider = tel.Meters, tel.Tracers
	store, err := occ.NewMemory[string, occtest.Doc](&cfg)
	if err != nil {
		t.Fatal(err)
	}
	insertDoc(t, store, occtest.Doc{ID: "row"})

	type paused struct{}
	reached, resume := make(chan struct{}), make(chan struct{})
	first := true
	defer failpoint.Handle(failpoint.At("occ.update.before-write", failpoint.Call(func(ctx context.Context) {
		if ctx.Value(paused{}) != nil && first {
			first = false
			close(reached)
			<-resume
		}
	})))()
	done := make(chan error, 1)
	go func() {
		_, err := occ.Update(context.WithValue(ctx, paused{}, true), store, "row", increment)
		done <- err
	}()
	<-reached
	if _, err := occ.Update(ctx, store, "row", increment); err != nil {
		t.Fatal(err)
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatalf("the paused writer: %v, want its retry applied", err)
	}
	if d, v := loadDoc(t, store, "row"); d.Counter != 2 || v != 3 {
		t.Fatalf("counter %d at version %d, want 2 at 3: an update was lost", d.Counter, v)
	}

	if n := tel.Sum(t, "lockfree.occ.attempts"); n != 3 {
		t.Errorf("attempts = %d, want 3\n%s", n, tel.Describe(t))
	}
	if n := tel.Sum(t, "lockfree.occ.conflicts", attribute.String(telemetry.Cause, "version")); n != 1 {
		t.Errorf("conflicts = %d, want 1\n%s", n, tel.Describe(t))
	}
	if n, _ := tel.Count(t, "lockfree.occ.retry.delay"); n != 1 {
		t.Errorf("retry delays = %d, want 1\n%s", n, tel.Describe(t))
	}
	if n := tel.Sum(t, "lockfree.occ.give_ups"); n != 0 {
		t.Errorf("give-ups = %d, want 0", n)
	}
	var attempts []int64
	for _, s := range tel.SpansNamed("occ.Update") {
		a, _ := telemetrytest.Attr(s, telemetry.Attempt)
		attempts = append(attempts, a.AsInt64())
	}
	if len(attempts) != 2 || attempts[0]+attempts[1] != 3 {
		t.Errorf("occ.Update spans with attempts %v, want 1 and 2", attempts)
	}
}

// RetryOnConflict records on the provider of WithMeterProvider; a call that
// runs out of attempts is a give-up.
func TestRetryOnConflictGiveUpIsCounted(t *testing.T) {
	t.Parallel()
	tel := telemetrytest.New(t)
	conflict := &occ.ConflictError{Key: "k", Expected: 1, Actual: 2}
	err := occ.RetryOnConflict(ctx, func(context.Context) error { return conflict },
		occ.WithBackoff(occ.Backoff{Steps: 3, Duration: time.Microsecond}), occ.WithMeterProvider(tel.Meters))
	if !errors.Is(err, occ.ErrConflict) {
		t.Fatalf("RetryOnConflict: %v", err)
	}
	if a, c, g := tel.Sum(t, "lockfree.occ.attempts"), tel.Sum(t, "lockfree.occ.conflicts"), tel.Sum(t, "lockfree.occ.give_ups"); a != 3 || c != 3 || g != 1 {
		t.Errorf("attempts %d, conflicts %d, give-ups %d; want 3, 3, 1\n%s", a, c, g, tel.Describe(t))
	}
}
