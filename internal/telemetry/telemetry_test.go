package telemetry_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
)

// Recording with a pre-built attribute set allocates nothing, on a
// recording meter as on none; so does a span that nobody configured.
func TestHotPathAllocatesNothing(t *testing.T) {
	tel := telemetrytest.New(t)
	ctx := context.Background()
	for name, in := range map[string]telemetry.Instruments{
		"none":   telemetry.NewInstruments(nil, "test"),
		"memory": telemetry.NewInstruments(tel.Meters, "test"),
	} {
		c := in.Counter("lockfree.test.things", "{thing}", "Things.")
		h := in.Duration("lockfree.test.duration", "Durations.")
		a := telemetry.NewAttrs(attribute.String(telemetry.Outcome, "ok"))
		c.Add(ctx, 1, a.Add()...) // a meter builds its series on first use
		h.Record(ctx, 0.1, a.Record()...)
		if n := testing.AllocsPerRun(100, func() {
			c.Add(ctx, 1, a.Add()...)
			h.Record(ctx, 0.1, a.Record()...)
		}); n != 0 {
			t.Errorf("%s: %v allocations per measurement", name, n)
		}
	}
	var none telemetry.Tracer
	if n := testing.AllocsPerRun(100, func() {
		_, span := none.Start(ctx, "test.Op")
		if span.Recording() {
			span.Set(attribute.String(telemetry.LockName, "x"))
		}
		span.End(errors.New("static"))
	}); n > 1 { // the error above
		t.Errorf("%v allocations per span without a TracerProvider", n)
	}
	if got := tel.Sum(t, "lockfree.test.things", attribute.String(telemetry.Outcome, "ok")); got != 102 { // AllocsPerRun runs once more to warm up
		t.Errorf("counted %d, want 102", got)
	}
}

// Instrument names within the API's syntax report no error; one outside it
// is reported to otel.Handle.
func TestInstrumentNamesAreValid(t *testing.T) {
	var errs []error
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { errs = append(errs, err) }))
	defer otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	tel := telemetrytest.New(t)
	in := telemetry.NewInstruments(tel.Meters, "test")
	in.Counter("lockfree.test.a", "{a}", "A.")
	in.Counter("bad name with spaces!", "{a}", "A.")
	if len(errs) != 1 {
		t.Fatalf("%d errors reported, want 1 for the bad name: %v", len(errs), errs)
	}
}
