package leader_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/leader"
)

// A leader loses its lease (an operator's forced release, another
// elected): its term ends with cause lost, it no longer counts as leading,
// and the new leader's resignation and a canceled campaign are counted too.
func TestLostTermIsCounted(t *testing.T) {
	t.Parallel()
	store := newMemory(t, nil)
	tel := telemetrytest.New(t)
	cfg := func(holder string) *leader.Config {
		return &leader.Config{Holder: holder, TTL: time.Minute, MeterProvider: tel.Meters, TracerProvider: tel.Tracers,
			Keepalive: &fencedlock.KeepaliveConfig{Interval: 10 * time.Millisecond, MaxRenewals: -1}}
	}
	election := attribute.String(telemetry.Election, "close-day")
	ea, err := leader.NewElection(store, "close-day", cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Resign(ctx)
	if n := tel.Sum(t, "lockfree.leader.leading", election); n != 1 {
		t.Fatalf("leading = %d while a leads, want 1\n%s", n, tel.Describe(t))
	}
	forced, _, err := store.Holder(ctx, ea.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Release(ctx, forced); err != nil {
		t.Fatal(err)
	}
	eb, err := leader.NewElection(store, "close-day", cfg("b"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := eb.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	<-a.Context().Done()
	lost := attribute.String(telemetry.Cause, "lost")
	waitFor(t, 30*time.Second, func() bool { v, _ := tel.Total("lockfree.leader.terms.ended", election, lost); return v == 1 })
	if n := tel.Sum(t, "lockfree.leader.leading", election); n != 1 {
		t.Errorf("leading = %d with b alone leading, want 1\n%s", n, tel.Describe(t))
	}

	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := ea.Campaign(cctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a's campaign while b leads: %v", err)
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	resigned := attribute.String(telemetry.Cause, "resigned")
	waitFor(t, 30*time.Second, func() bool { v, _ := tel.Total("lockfree.leader.terms.ended", election, resigned); return v == 1 })
	if n := tel.Sum(t, "lockfree.leader.leading", election); n != 0 {
		t.Errorf("leading = %d after both terms ended, want 0\n%s", n, tel.Describe(t))
	}
	for outcome, want := range map[string]uint64{"elected": 2, "canceled": 1} {
		if n, _ := tel.Count(t, "lockfree.leader.campaign.duration", election, attribute.String(telemetry.Outcome, outcome)); n != want {
			t.Errorf("campaigns %s = %d, want %d\n%s", outcome, n, want, tel.Describe(t))
		}
	}
	spans := tel.SpansNamed("leader.Campaign")
	if len(spans) != 3 {
		t.Fatalf("%d Campaign spans, want 3", len(spans))
	}
	if v, ok := telemetrytest.Attr(spans[1], telemetry.LockToken); !ok || v.AsInt64() != b.Token() {
		t.Errorf("b's span has token %v (%v), want %d", v, ok, b.Token())
	}
}
