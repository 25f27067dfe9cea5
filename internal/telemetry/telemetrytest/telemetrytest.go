// Package telemetrytest records what lockfree's packages measure and trace,
// for tests: an in-memory MeterProvider and TracerProvider written against
// the OpenTelemetry API alone, so the library needs no SDK, not even in its
// tests.
//
// It aggregates the way the SDK's defaults do for what the library records:
// int64 counters and up-down counters sum per attribute set; histograms
// (int64 and float64) keep a count and a sum per attribute set; spans keep
// their name, parent, attributes (last value per key), status (Ok beats
// Error beats Unset) and events, and are visible once ended. It does NOT
// record gauges or observable instruments: creating one panics, so a test
// never silently reads zero from an instrument it cannot see.
package telemetrytest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Telemetry is a MeterProvider and a TracerProvider that keep everything in
// memory. It is safe for concurrent use; its zero value is not usable (call
// New or Start).
type Telemetry struct {
	Meters  metric.MeterProvider
	Tracers trace.TracerProvider

	mu      sync.Mutex
	streams map[string]*stream // by instrument name, across scopes
	order   []*stream          // in creation order
	ended   []Span
	ids     uint64 // last span and trace id handed out
}

// New returns a Telemetry for a test. It holds nothing that needs closing;
// New takes t to keep the shape of a test helper.
func New(testing.TB) *Telemetry { return Start() }

// Start returns a Telemetry for a test's child process, which has no
// testing.TB.
func Start() *Telemetry {
	tel := &Telemetry{streams: map[string]*stream{}}
	tel.Meters = meterProvider{tel: tel}
	tel.Tracers = tracerProvider{tel: tel}
	return tel
}

// Kind is the kind of an instrument.
type Kind int

// The kinds of instrument the library creates.
const (
	Counter       Kind = iota + 1 // int64 counter
	UpDownCounter                 // int64 up-down counter
	Histogram                     // int64 or float64 histogram
)

// String names the kind, for failure messages.
func (k Kind) String() string {
	switch k {
	case Counter:
		return "counter"
	case UpDownCounter:
		return "up-down counter"
	case Histogram:
		return "histogram"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Metric is what one instrument recorded: a snapshot, which later
// measurements do not change.
type Metric struct {
	Scope       string // of the meter that created it first
	Name        string
	Unit        string
	Description string
	Kind        Kind
	Points      []Point // one per attribute set, in no particular order
}

// Point is the aggregate of one attribute set: Value for a counter or an
// up-down counter, Count and Sum for a histogram.
type Point struct {
	Attributes attribute.Set
	Value      int64
	Count      uint64
	Sum        float64
}

// Collect returns the metrics recorded so far, in the order their
// instruments were first created.
func (tel *Telemetry) Collect(testing.TB) []Metric {
	tel.mu.Lock()
	defer tel.mu.Unlock()
	out := make([]Metric, 0, len(tel.order))
	for _, s := range tel.order {
		out = append(out, s.snapshot())
	}
	return out
}

// Metric returns the metric called name, and false when no instrument of
// that name was created.
func (tel *Telemetry) Metric(_ testing.TB, name string) (Metric, bool) { return tel.find(name) }

func (tel *Telemetry) find(name string) (Metric, bool) {
	tel.mu.Lock()
	defer tel.mu.Unlock()
	s, ok := tel.streams[name]
	if !ok {
		return Metric{}, false
	}
	return s.snapshot(), true
}

// Total is Sum for a child process: the total of the counter or up-down
// counter name on the points with attrs, 0 when nothing created it, and an
// error when name is a histogram.
func (tel *Telemetry) Total(name string, attrs ...attribute.KeyValue) (int64, error) {
	m, ok := tel.find(name)
	if !ok {
		return 0, nil
	}
	if m.Kind != Counter && m.Kind != UpDownCounter {
		return 0, fmt.Errorf("telemetrytest: %s is a %v, not a counter", name, m.Kind)
	}
	var total int64
	for _, p := range m.Points {
		if matches(p.Attributes, attrs) {
			total += p.Value
		}
	}
	return total, nil
}

// Sum returns the total of the counter (or up-down counter) name over the
// points whose attributes include every one of attrs; 0 when there are
// none. It fails the test when name is a histogram.
func (tel *Telemetry) Sum(t testing.TB, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	total, err := tel.Total(name, attrs...)
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// Count returns how many values the histogram name recorded on the points
// whose attributes include every one of attrs, and their sum. It fails the
// test when name is not a histogram.
func (tel *Telemetry) Count(t testing.TB, name string, attrs ...attribute.KeyValue) (n uint64, sum float64) {
	t.Helper()
	m, ok := tel.find(name)
	if !ok {
		return 0, 0
	}
	if m.Kind != Histogram {
		t.Fatalf("telemetrytest: %s is a %v, not a histogram", name, m.Kind)
	}
	for _, p := range m.Points {
		if matches(p.Attributes, attrs) {
			n, sum = n+p.Count, sum+p.Sum
		}
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

// Describe lists every metric point recorded so far, one per line in
// lexical order, for a test's failure message.
func (tel *Telemetry) Describe(t testing.TB) string {
	var lines []string
	for _, m := range tel.Collect(t) {
		for _, p := range m.Points {
			if m.Kind == Histogram {
				lines = append(lines, fmt.Sprintf("%s%s count %d sum %g", m.Name, attrText(p.Attributes), p.Count, p.Sum))
			} else {
				lines = append(lines, fmt.Sprintf("%s%s = %d", m.Name, attrText(p.Attributes), p.Value))
			}
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

// Spans returns the spans ended so far, in the order they ended.
func (tel *Telemetry) Spans() []Span {
	tel.mu.Lock()
	defer tel.mu.Unlock()
	return slices.Clone(tel.ended)
}

// SpansNamed returns the ended spans called name, in the order they ended.
func (tel *Telemetry) SpansNamed(name string) []Span {
	var out []Span
	for _, s := range tel.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Attr returns span's attribute key, and false when it has none.
func Attr(span Span, key string) (attribute.Value, bool) {
	for _, kv := range span.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}
