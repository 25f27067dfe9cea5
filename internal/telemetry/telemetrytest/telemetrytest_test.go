package telemetrytest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
)

var (
	ctx = context.Background()
	ok  = attribute.String("outcome", "ok")
	bad = attribute.String("outcome", "bad")
)

func with(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

// Each helper returns exactly what was recorded on the points it selects,
// so an assertion that expects another count fails.
func TestMetrics(t *testing.T) {
	tel := telemetrytest.New(t)
	m := tel.Meters.Meter("a")
	c, _ := m.Int64Counter("c", metric.WithUnit("{op}"))
	c.Add(ctx, 2, with(ok, attribute.Int("n", 1)))
	c.Add(ctx, 3, with(ok, attribute.Int("n", 2)))
	c.Add(ctx, 5, with(bad))
	c2, _ := tel.Meters.Meter("b").Int64Counter("c") // the same instrument from another meter
	c2.Add(ctx, 7, with(bad))
	u, _ := m.Int64UpDownCounter("u")
	u.Add(ctx, 4)
	u.Add(ctx, -3)
	h, _ := m.Float64Histogram("h")
	h.Record(ctx, 0.5, with(ok))
	h.Record(ctx, 1.5, with(ok))
	h.Record(ctx, 9, with(bad))
	hi, _ := m.Int64Histogram("hi")
	hi.Record(ctx, 10)

	for _, tc := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  int64
	}{
		{"c", nil, 17},
		{"c", []attribute.KeyValue{ok}, 5},
		{"c", []attribute.KeyValue{ok, attribute.Int("n", 2)}, 3},
		{"c", []attribute.KeyValue{bad}, 12},
		{"c", []attribute.KeyValue{attribute.String("outcome", "none")}, 0},
		{"u", nil, 1},
		{"never", nil, 0},
	} {
		if got := tel.Sum(t, tc.name, tc.attrs...); got != tc.want {
			t.Errorf("Sum(%s, %v) = %d, want %d", tc.name, tc.attrs, got, tc.want)
		}
		if got, err := tel.Total(tc.name, tc.attrs...); got != tc.want || err != nil {
			t.Errorf("Total(%s, %v) = %d, %v; want %d", tc.name, tc.attrs, got, err, tc.want)
		}
	}
	if _, err := tel.Total("h"); err == nil {
		t.Error("Total of a histogram: no error")
	}
	for _, tc := range []struct {
		name  string
		attrs []attribute.KeyValue
		n     uint64
		sum   float64
	}{
		{"h", nil, 3, 11},
		{"h", []attribute.KeyValue{ok}, 2, 2},
		{"hi", nil, 1, 10},
		{"never", nil, 0, 0},
	} {
		if n, sum := tel.Count(t, tc.name, tc.attrs...); n != tc.n || sum != tc.sum {
			t.Errorf("Count(%s, %v) = %d, %g; want %d, %g", tc.name, tc.attrs, n, sum, tc.n, tc.sum)
		}
	}
	if got, _ := tel.Metric(t, "c"); got.Unit != "{op}" || got.Scope != "a" || got.Kind != telemetrytest.Counter || len(got.Points) != 3 {
		t.Errorf("Metric(c) = %+v", got)
	}
	want := strings.Join([]string{
		"c{n=1,outcome=ok} = 2",
		"c{n=2,outcome=ok} = 3",
		"c{outcome=bad} = 12",
		"hi count 1 sum 10",
		"h{outcome=bad} count 1 sum 9",
		"h{outcome=ok} count 2 sum 2",
		"u = 1",
	}, "\n")
	if got := tel.Describe(t); got != want {
		t.Errorf("Describe:\n%s\nwant:\n%s", got, want)
	}
}

// A name outside the API's syntax, or reused with another kind, is an
// error; the instrument returned is still usable.
func TestInstrumentErrors(t *testing.T) {
	tel := telemetrytest.New(t)
	m := tel.Meters.Meter("a")
	if _, err := m.Int64Counter("lockfree.a_b/c-d"); err != nil {
		t.Error(err)
	}
	c, err := m.Int64Counter("bad name")
	if err == nil {
		t.Error("no error for a name with a space")
	}
	c.Add(ctx, 1)
	h, err := m.Float64Histogram("lockfree.a_b/c-d")
	if err == nil {
		t.Error("no error for a counter's name reused by a histogram")
	}
	h.Record(ctx, 1)
	if n := tel.Sum(t, "bad name"); n != 1 {
		t.Errorf("bad name counted %d, want 1", n)
	}
}

// Spans are visible once ended, with their parent, the last value of each
// attribute, the status the SDK would keep, and their events.
func TestSpans(t *testing.T) {
	tel := telemetrytest.New(t)
	tr := tel.Tracers.Tracer("scope")
	pctx, parent := tr.Start(ctx, "parent", trace.WithAttributes(attribute.Int("k", 1)))
	cctx, child := tr.Start(pctx, "child")
	if got, want := trace.SpanContextFromContext(cctx), child.SpanContext(); !got.Equal(want) {
		t.Errorf("context carries %v, want the child %v", got, want)
	}
	parent.SetAttributes(attribute.Int("k", 2), attribute.String("s", "x"))
	parent.SetStatus(codes.Error, "boom")
	parent.SetStatus(codes.Unset, "")
	child.SetStatus(codes.Ok, "")
	child.SetStatus(codes.Error, "ignored after Ok")
	child.RecordError(errors.New("oops"))
	child.AddEvent("e", trace.WithAttributes(ok))
	if len(tel.Spans()) != 0 {
		t.Fatal("spans visible before they ended")
	}
	child.End()
	parent.End()
	parent.SetAttributes(attribute.Int("k", 3)) // ignored: ended
	parent.End()

	spans := tel.Spans()
	if len(spans) != 2 || spans[0].Name != "child" || spans[1].Name != "parent" {
		t.Fatalf("spans %+v, want child then parent", spans)
	}
	c, p := spans[0], spans[1]
	if !c.Parent.Equal(p.SpanContext) || p.Parent.IsValid() || c.SpanContext.TraceID() != p.SpanContext.TraceID() ||
		c.SpanContext.SpanID() == p.SpanContext.SpanID() {
		t.Errorf("child %v under %v, parent %v under %v", c.SpanContext, c.Parent, p.SpanContext, p.Parent)
	}
	if v, _ := telemetrytest.Attr(p, "k"); v.AsInt64() != 2 || len(p.Attributes) != 2 {
		t.Errorf("parent attributes %v, want k=2 and s", p.Attributes)
	}
	if _, found := telemetrytest.Attr(p, "missing"); found {
		t.Error("Attr found a missing key")
	}
	if p.Status != (telemetrytest.Status{Code: codes.Error, Description: "boom"}) || c.Status != (telemetrytest.Status{Code: codes.Ok}) {
		t.Errorf("statuses: parent %v, child %v", p.Status, c.Status)
	}
	if len(c.Events) != 2 || c.Events[0].Name != "exception" || c.Events[1].Name != "e" {
		t.Errorf("child events %v", c.Events)
	}
	if n := len(tel.SpansNamed("parent")); n != 1 {
		t.Errorf("%d spans named parent, want 1", n)
	}
	_, root := tr.Start(pctx, "root", trace.WithNewRoot())
	root.End()
	if r := tel.SpansNamed("root")[0]; r.Parent.IsValid() || r.SpanContext.TraceID() == p.SpanContext.TraceID() {
		t.Errorf("new root %v under %v", r.SpanContext, r.Parent)
	}
}
