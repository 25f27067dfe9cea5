// Package telemetry is lockfree's one vocabulary of observability: the
// attribute keys that metrics, spans and log lines share in every package,
// the instrumentation scope of each package, and the plumbing from a
// config's MeterProvider and TracerProvider to pre-created instruments.
//
// The rules it encodes, for every package:
//
//   - A config has MeterProvider metric.MeterProvider and TracerProvider
//     trace.TracerProvider fields; nil means none: no metric is recorded, no
//     span started, and the instrumentation costs an interface call or a nil
//     check. A program that wants the global providers passes
//     otel.GetMeterProvider() and otel.GetTracerProvider().
//   - Instruments are created once, in the constructor, and the attribute
//     sets of the hot path are built there too (Attrs): recording a
//     measurement allocates nothing.
//   - Metric names are lockfree.<package>.<thing>, units are UCUM ("s",
//     "By", "{operation}"), durations are float64 histograms in seconds.
//   - Metric attributes have few values (an outcome, a cause, a configured
//     prefix); lock names, keys, partitions and epochs go on spans and log
//     lines only, never on metrics, whose series they would multiply.
//   - Spans and log lines never carry secrets or payloads: no row, no
//     request body, no stored response.
package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// ScopePrefix is the instrumentation scope of every package, followed by
// the package's import path below the module: ScopePrefix + "fencedlock".
const ScopePrefix = "github.com/lockfree-go/lockfree/"

// Attribute keys, the same on metrics, spans and log lines (slog keys) in
// every package. They are untyped string constants, so that both
// attribute.String(telemetry.LockName, v) and slog.String(telemetry.LockName,
// v) take them.
const (
	// LockName is a lock's full name (prefix included). Spans and logs only.
	LockName = "lockfree.lock.name"
	// LockPrefix is a Locker's configured LockPrefix: the kind of resource
	// its locks protect ("occ/", "partition/", "inventory/").
	LockPrefix = "lockfree.lock.prefix"
	// LockToken is a lease's fencing token. Spans and logs only.
	LockToken = "lockfree.lock.token"
	// Holder is the identity in a lock or lease table. Spans and logs only.
	Holder = "lockfree.lock.holder"
	// Outcome is how an operation ended, one of a package's documented
	// values ("acquired", "held", "error", "applied", "conflict", …).
	Outcome = "lockfree.outcome"
	// Cause is why something ended that was not asked to end ("lost",
	// "expiring", "max_renewals").
	Cause = "lockfree.cause"
	// Mode is a package's mode of operation (idempotency: "transactional",
	// "leased", "fenced").
	Mode = "lockfree.mode"
	// Operation is the store operation ("load", "insert", "update", …).
	Operation = "lockfree.operation"
	// Election is a leader election's name (its lock name without the
	// prefix): chosen by the program, one per job, so few per process.
	Election = "lockfree.election"
	// Member is a partition member's name.
	Member = "lockfree.member"
	// Incarnation is a member's incarnation: one per join.
	Incarnation = "lockfree.incarnation"
	// Partition is a partition number. Spans and logs only.
	Partition = "lockfree.partition"
	// Epoch is a partition's or a writer's fencing epoch. Spans and logs
	// only.
	Epoch = "lockfree.epoch"
	// Attempt is the 1-based number of an attempt. Spans and logs only.
	Attempt = "lockfree.attempt"
	// Group is a consumer group.
	Group = "lockfree.group"
	// Topic is a Kafka topic.
	Topic = "lockfree.topic"
	// Offset is a Kafka offset. Spans and logs only.
	Offset = "lockfree.offset"
	// Generation is a Kafka consumer group's generation. Logs only.
	Generation = "lockfree.generation"
	// Count is how many items one operation handled (messages in a batch).
	// Spans and logs only.
	Count = "lockfree.count"
	// Panic is the value a user's function panicked with, and PanicStack
	// its goroutine's stack. Logs only.
	Panic      = "lockfree.panic"
	PanicStack = "lockfree.panic.stack"
	// Error is the key of an error in a log line.
	Error = "error"
)

// Err is the log attribute of an error.
func Err(err error) slog.Attr { return slog.Any(Error, err) }

// DurationBuckets are the histogram boundaries, in seconds, of every
// duration lockfree records: those the semantic conventions advise for
// request durations (5ms to 10s), plus 30s and 60s for waits and handovers
// that last a lease or two.
var DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60}

// Meter returns the meter of package pkg ("fencedlock", "partition") from
// mp, or a no-op meter when mp is nil.
func Meter(mp metric.MeterProvider, pkg string) metric.Meter {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	return mp.Meter(ScopePrefix + pkg)
}

// Instruments creates the instruments of one package on one meter. An
// instrument that cannot be created (a provider's error) is reported to
// otel.Handle and replaced by the meter's fallback, which the API requires to
// be usable: metrics never fail an operation.
type Instruments struct{ m metric.Meter }

// NewInstruments returns the instruments builder of package pkg on mp (nil:
// no-op).
func NewInstruments(mp metric.MeterProvider, pkg string) Instruments {
	return Instruments{Meter(mp, pkg)}
}

// Counter is a monotonic count of discrete things.
func (b Instruments) Counter(name, unit, desc string) metric.Int64Counter {
	c, err := b.m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	if err != nil {
		otel.Handle(err)
	}
	return c
}

// UpDown is a count that goes up and down (partitions owned).
func (b Instruments) UpDown(name, unit, desc string) metric.Int64UpDownCounter {
	c, err := b.m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	if err != nil {
		otel.Handle(err)
	}
	return c
}

// Duration is a histogram of durations in seconds, with DurationBuckets.
func (b Instruments) Duration(name, desc string) metric.Float64Histogram {
	h, err := b.m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	if err != nil {
		otel.Handle(err)
	}
	return h
}

// Histogram is a histogram of int64 values (bytes, lag in messages) with
// the SDK's default boundaries unless bounds are given.
func (b Instruments) Histogram(name, unit, desc string, bounds ...float64) metric.Int64Histogram {
	opts := []metric.Int64HistogramOption{metric.WithUnit(unit), metric.WithDescription(desc)}
	if len(bounds) > 0 {
		opts = append(opts, metric.WithExplicitBucketBoundaries(bounds...))
	}
	h, err := b.m.Int64Histogram(name, opts...)
	if err != nil {
		otel.Handle(err)
	}
	return h
}

// Attrs is an attribute set built once, for measurements on the hot path:
// passing Add() or Record() to an instrument allocates nothing, where
// metric.WithAttributes would build a set on every call. The zero Attrs is
// the empty set.
type Attrs struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

// NewAttrs returns the set of kv.
func NewAttrs(kv ...attribute.KeyValue) Attrs {
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	return Attrs{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

// Add returns the options of a counter's Add.
func (a Attrs) Add() []metric.AddOption { return a.add }

// Record returns the options of a histogram's Record.
func (a Attrs) Record() []metric.RecordOption { return a.rec }

// Tracer starts the spans of one package. The zero Tracer (no
// TracerProvider configured) starts none, at the cost of a nil check: no
// context is derived and nothing is allocated.
type Tracer struct{ t trace.Tracer }

// NewTracer returns the tracer of package pkg on tp; nil tp gives the zero
// Tracer.
func NewTracer(tp trace.TracerProvider, pkg string) Tracer {
	if tp == nil {
		return Tracer{}
	}
	return Tracer{tp.Tracer(ScopePrefix + pkg)}
}

// Start starts a span named name (a constant: "<pkg>.<Operation>") as a
// child of ctx's span, and returns the context that carries it, so that the
// statements run under it — and the spans of a pgx tracer the user
// installed on their own pool — nest below it.
func (t Tracer) Start(ctx context.Context, name string) (context.Context, Span) {
	if t.t == nil {
		return ctx, Span{}
	}
	ctx, s := t.t.Start(ctx, name)
	return ctx, Span{s}
}

// Span is a started span, or nothing (the zero Span). Build attributes only
// when Recording, so that a program without tracing allocates nothing.
type Span struct{ s trace.Span }

// Recording reports whether the span records attributes.
func (s Span) Recording() bool { return s.s != nil && s.s.IsRecording() }

// Set sets attributes on the span.
func (s Span) Set(kv ...attribute.KeyValue) {
	if s.s != nil {
		s.s.SetAttributes(kv...)
	}
}

// End ends the span; a non-nil err marks it failed and is recorded as its
// status description. Errors the caller expects (a refused acquire, a
// conflict) should be passed as nil and described by an Outcome attribute.
func (s Span) End(err error) {
	if s.s == nil {
		return
	}
	if err != nil {
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}
