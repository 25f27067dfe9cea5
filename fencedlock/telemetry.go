package fencedlock

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// The metrics of a Locker (docs/fencedlock.md, "Metrics"). Each carries
// lockfree.lock.prefix, the Locker's LockPrefix; lock names never go on a
// metric.
const (
	metricAcquire    = "lockfree.fencedlock.acquire.duration"
	metricWait       = "lockfree.fencedlock.wait.duration"
	metricRenewals   = "lockfree.fencedlock.renewals"
	metricLeasesLost = "lockfree.fencedlock.leases.lost"
	metricRejections = "lockfree.fencedlock.fenced.rejections"
)

// lockerTelemetry holds a Locker's instruments and the attribute sets of
// each outcome, built once so that recording allocates nothing.
type lockerTelemetry struct {
	tracer     telemetry.Tracer
	acquire    metric.Float64Histogram
	wait       metric.Float64Histogram
	renewals   metric.Int64Counter
	lost       metric.Int64Counter
	rejections metric.Int64Counter

	acquired, held, failed             telemetry.Attrs // an attempt, a wait, a renewal
	canceled, renewed, renewLost       telemetry.Attrs
	causeLost, causeExpiring, causeMax telemetry.Attrs
	prefix                             telemetry.Attrs
}

func newLockerTelemetry(c LockerConfig) *lockerTelemetry {
	in := telemetry.NewInstruments(c.MeterProvider, "fencedlock")
	p := attribute.String(telemetry.LockPrefix, c.LockPrefix)
	with := func(key, value string) telemetry.Attrs { return telemetry.NewAttrs(p, attribute.String(key, value)) }
	return &lockerTelemetry{
		tracer:     telemetry.NewTracer(c.TracerProvider, "fencedlock"),
		acquire:    in.Duration(metricAcquire, "Duration of one attempt to acquire a lock, by outcome (acquired, held, canceled, error)."),
		wait:       in.Duration(metricWait, "Time Locker.Do spent getting a lease, from its call to the lease or its end (acquired, canceled, error)."),
		renewals:   in.Counter(metricRenewals, "{renewal}", "Renewals of leases by keepalives, by outcome (renewed, lost, error)."),
		lost:       in.Counter(metricLeasesLost, "{lease}", "Leases whose keepalive gave up while the function ran, by cause (lost, expiring, max_renewals)."),
		rejections: in.Counter(metricRejections, "{write}", "Functions run under a lease that returned a stale-token rejection (ErrFenced) from the resource."),

		acquired: with(telemetry.Outcome, "acquired"), held: with(telemetry.Outcome, "held"),
		failed: with(telemetry.Outcome, "error"), canceled: with(telemetry.Outcome, "canceled"),
		renewed: with(telemetry.Outcome, "renewed"), renewLost: with(telemetry.Outcome, "lost"),
		causeLost: with(telemetry.Cause, "lost"), causeExpiring: with(telemetry.Cause, "expiring"),
		causeMax: with(telemetry.Cause, "max_renewals"),
		prefix:   telemetry.NewAttrs(p),
	}
}

// outcome is the attribute set of an acquire's or a renewal's result.
func (t *lockerTelemetry) outcome(err error, ok, refused telemetry.Attrs) telemetry.Attrs {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, ErrHeld), errors.Is(err, ErrNotHeld):
		return refused
	}
	return t.failed
}

// tryAcquire is one timed attempt at the store.
func (t *lockerTelemetry) tryAcquire(ctx context.Context, store Store, name, holder string, ttl time.Duration) (Lease, error) {
	start := time.Now()
	l, err := store.Acquire(ctx, name, holder, ttl)
	t.acquire.Record(ctx, time.Since(start).Seconds(), t.ended(ctx, err, t.held).Record()...)
	return l, err
}

// tryAcquireAll is one timed attempt at several locks, recorded as one
// acquire.
func (t *lockerTelemetry) tryAcquireAll(ctx context.Context, store MultiStore, names []string, holder string, ttl time.Duration) ([]Lease, error) {
	start := time.Now()
	ls, err := store.AcquireAll(ctx, names, holder, ttl)
	t.acquire.Record(ctx, time.Since(start).Seconds(), t.ended(ctx, err, t.held).Record()...)
	return ls, err
}

// ended is the outcome of an acquire or a wait: acquired, refused (held),
// canceled by ctx, or error.
func (t *lockerTelemetry) ended(ctx context.Context, err error, refused telemetry.Attrs) telemetry.Attrs {
	if err != nil && !errors.Is(err, ErrHeld) && ctx.Err() != nil {
		return t.canceled
	}
	return t.outcome(err, t.acquired, refused)
}

// waited records how long Do took to get its lease.
func (t *lockerTelemetry) waited(ctx context.Context, start time.Time, err error) {
	t.wait.Record(ctx, time.Since(start).Seconds(), t.ended(ctx, err, t.failed).Record()...)
}

// renewal counts one renewal by a keepalive; one cut short by the
// keepalive's stop is not counted.
func (t *lockerTelemetry) renewal(ctx context.Context, err error) {
	if err != nil && ctx.Err() != nil {
		return
	}
	t.renewals.Add(ctx, 1, t.outcome(err, t.renewed, t.renewLost).Add()...)
}

// finished counts what the end of fn says about the lease and the resource:
// a keepalive that had given up (cause is its context's cause) and a
// rejected stale token.
func (t *lockerTelemetry) finished(ctx context.Context, cause, err error) {
	switch {
	case errors.Is(cause, ErrLost):
		t.lost.Add(ctx, 1, t.causeLost.Add()...)
	case errors.Is(cause, ErrExpiring):
		t.lost.Add(ctx, 1, t.causeExpiring.Add()...)
	case errors.Is(cause, ErrMaxRenewals):
		t.lost.Add(ctx, 1, t.causeMax.Add()...)
	}
	if errors.Is(err, ErrFenced) {
		t.rejections.Add(ctx, 1, t.prefix.Add()...)
	}
}
