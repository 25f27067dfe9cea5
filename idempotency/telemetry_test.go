package idempotency_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
)

// A first execution is counted with the size of what it stored, a retry as
// a replay, a key presented with another payload as key_reused; each is a
// span idempotency.Do with its outcome, none of them failed.
func TestExecutionsAreCounted(t *testing.T) {
	t.Parallel()
	tel := telemetrytest.New(t)
	store, err := idempotency.NewMemory(&idempotency.MemoryConfig{MeterProvider: tel.Meters, TracerProvider: tel.Tracers})
	if err != nil {
		t.Fatal(err)
	}
	key := idempotency.Key{Tenant: "t", ID: "k"}
	fn := func(context.Context) (idempotency.Result, error) {
		return idempotency.Result{Status: 201, Body: []byte("0123456789")}, nil
	}
	for range 2 {
		if _, err := store.Do(ctx, key, payFP, fn); err != nil {
			t.Fatal(err)
		}
	}
	other := idempotency.NewFingerprint([]byte("another payload"))
	if _, err := store.Do(ctx, key, other, fn); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("a reused key: %v", err)
	}
	transactional := attribute.String(telemetry.Mode, "transactional")
	for outcome, n := range map[string]int64{"executed": 1, "replayed": 1, "key_reused": 1} {
		if got := tel.Sum(t, "lockfree.idempotency.requests", transactional, attribute.String(telemetry.Outcome, outcome)); got != n {
			t.Errorf("%s = %d, want %d\n%s", outcome, got, n, tel.Describe(t))
		}
	}
	if n, sum := tel.Count(t, "lockfree.idempotency.stored.size", transactional); n != 1 || sum != 10 {
		t.Errorf("stored sizes: %d recorded, sum %v; want one of 10 bytes", n, sum)
	}
	spans := tel.SpansNamed("idempotency.Do")
	if len(spans) != 3 {
		t.Fatalf("%d idempotency.Do spans, want 3", len(spans))
	}
	for _, s := range spans {
		if s.Status.Code != 0 {
			t.Errorf("span failed: %v", s.Status)
		}
	}
}
