// Package telemetrytest collects what lockfree's packages record, for tests:
// metrics through the SDK's ManualReader and spans through a SpanRecorder.
// Only tests import it, so the SDK is a test-only dependency of the library.
package telemetrytest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Telemetry is a MeterProvider and a TracerProvider that keep everything in
// memory. It is safe for concurrent use.
type Telemetry struct {
	Meters  *sdkmetric.MeterProvider
	Tracers *sdktrace.TracerProvider
	reader  *sdkmetric.ManualReader
	spans   *tracetest.SpanRecorder
}

// New returns a Telemetry that shuts down with t.
func New(t testing.TB) *Telemetry {
	tel := Start()
	t.Cleanup(func() {
		_ = tel.Meters.Shutdown(context.Background())
		_ = tel.Tracers.Shutdown(context.Background())
	})
	return tel
}

// Start returns a Telemetry for a test's child process, which has no
// testing.TB: it lives as long as the process.
func Start() *Telemetry {
	r := sdkmetric.NewManualReader()
	s := tracetest.NewSpanRecorder()
	return &Telemetry{
		Meters:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)),
		Tracers: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s)),
		reader:  r,
		spans:   s,
	}
}

// Collect returns the metrics recorded so far.
func (tel *Telemetry) Collect(t testing.TB) []metricdata.Metrics {
	t.Helper()
	all, err := tel.collect()
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func (tel *Telemetry) collect() ([]metricdata.Metrics, error) {
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		return nil, err
	}
	var all []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		all = append(all, sm.Metrics...)
	}
	return all, nil
}

// Total is Sum for a child process: the total of the int64 counter name on
// the points with attrs, 0 when nothing recorded it.
func (tel *Telemetry) Total(name string, attrs ...attribute.KeyValue) (int64, error) {
	all, err := tel.collect()
	if err != nil {
		return 0, err
	}
	for _, m := range all {
		if m.Name == name {
			return sumOf(m, attrs)
		}
	}
	return 0, nil
}

func sumOf(m metricdata.Metrics, attrs []attribute.KeyValue) (int64, error) {
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		return 0, fmt.Errorf("%s is a %T, not an int64 sum", m.Name, m.Data)
	}
	var total int64
	for _, p := range sum.DataPoints {
		if matches(p.Attributes, attrs) {
			total += p.Value
		}
	}
	return total, nil
}

// Metric returns the metric called name, and false when nothing recorded it.
func (tel *Telemetry) Metric(t testing.TB, name string) (metricdata.Metrics, bool) {
	t.Helper()
	for _, m := range tel.Collect(t) {
		if m.Name == name {
			return m, true
		}
	}
	return metricdata.Metrics{}, false
}

// Sum returns the total of the int64 counter (or up-down counter) name over
// the points whose attributes include every one of attrs; 0 when there are
// none.
func (tel *Telemetry) Sum(t testing.TB, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	m, ok := tel.Metric(t, name)
	if !ok {
		return 0
	}
	total, err := sumOf(m, attrs)
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// Count returns how many values the histogram name recorded on the points
// whose attributes include every one of attrs, and their sum.
func (tel *Telemetry) Count(t testing.TB, name string, attrs ...attribute.KeyValue) (n uint64, sum float64) {
	t.Helper()
	m, ok := tel.Metric(t, name)
	if !ok {
		return 0, 0
	}
	switch h := m.Data.(type) {
	case metricdata.Histogram[float64]:
		for _, p := range h.DataPoints {
			if matches(p.Attributes, attrs) {
				n, sum = n+p.Count, sum+p.Sum
			}
		}
	case metricdata.Histogram[int64]:
		for _, p := range h.DataPoints {
			if matches(p.Attributes, attrs) {
				n, sum = n+p.Count, sum+float64(p.Sum)
			}
		}
	default:
		t.Fatalf("%s is a %T, not a histogram", name, m.Data)
	}
	return n, sum
}

func matches(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// Describe lists every metric point recorded so far, one per line, for a
// test's failure message.
func (tel *Telemetry) Describe(t testing.TB) string {
	t.Helper()
	var lines []string
	for _, m := range tel.Collect(t) {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s%s = %d", m.Name, attrText(p.Attributes), p.Value))
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s%s count %d sum %g", m.Name, attrText(p.Attributes), p.Count, p.Sum))
			}
		case metricdata.Histogram[int64]:
			for _, p := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s%s count %d sum %d", m.Name, attrText(p.Attributes), p.Count, p.Sum))
			}
		default:
			lines = append(lines, fmt.Sprintf("%s (%T)", m.Name, m.Data))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func attrText(s attribute.Set) string {
	if s.Len() == 0 {
		return ""
	}
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, fmt.Sprintf("%s=%s", kv.Key, kv.Value.Emit()))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// Spans returns the spans ended so far.
func (tel *Telemetry) Spans() []sdktrace.ReadOnlySpan { return tel.spans.Ended() }

// SpansNamed returns the ended spans called name.
func (tel *Telemetry) SpansNamed(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// Attr returns span's attribute key, and false when it has none.
func Attr(span sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range span.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}
