package report

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func f(x float64) *float64 { return &x }

// Merging the workers' series: counters and up-down counters add, gauges
// keep the highest, histograms add counts, sums and buckets and keep the
// extremes; series differ by attributes; the inputs stay as they were.
func TestMergeMetrics(t *testing.T) {
	bounds := []float64{0.01, 0.1}
	a := []Metric{
		{Name: "c", Kind: MetricCounter, Attrs: map[string]string{"lockfree.outcome": "applied"}, Value: 3},
		{Name: "c", Kind: MetricCounter, Attrs: map[string]string{"lockfree.outcome": "error"}, Value: 1},
		{Name: "u", Kind: MetricUpDown, Value: 5},
		{Name: "g", Kind: MetricGauge, Value: 7},
		{Name: "h", Kind: MetricHistogram, Unit: "s", Count: 3, Sum: 0.2, Min: f(0.005), Max: f(0.15), Bounds: bounds, Buckets: []uint64{1, 1, 1}},
	}
	b := []Metric{
		{Name: "c", Kind: MetricCounter, Attrs: map[string]string{"lockfree.outcome": "applied"}, Value: 4},
		{Name: "u", Kind: MetricUpDown, Value: -2},
		{Name: "g", Kind: MetricGauge, Value: 6},
		{Name: "h", Kind: MetricHistogram, Unit: "s", Count: 2, Sum: 0.05, Min: f(0.02), Max: f(0.03), Bounds: bounds, Buckets: []uint64{0, 2, 0}},
	}
	before := a[4].Buckets[1]
	got := MergeMetrics(a, b)
	want := []Metric{
		{Name: "c", Kind: MetricCounter, Attrs: map[string]string{"lockfree.outcome": "applied"}, Value: 7},
		{Name: "c", Kind: MetricCounter, Attrs: map[string]string{"lockfree.outcome": "error"}, Value: 1},
		{Name: "g", Kind: MetricGauge, Value: 7},
		{Name: "h", Kind: MetricHistogram, Unit: "s", Count: 5, Sum: 0.25, Min: f(0.005), Max: f(0.15), Bounds: bounds, Buckets: []uint64{1, 3, 1}},
		{Name: "u", Kind: MetricUpDown, Value: 3},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merged:\n%+v\nwant\n%+v", got, want)
	}
	if a[4].Buckets[1] != before {
		t.Error("MergeMetrics modified its input")
	}
	// Buckets over different bounds cannot be added: dropped, the count
	// and the sum kept.
	c := []Metric{{Name: "h", Kind: MetricHistogram, Count: 1, Sum: 1, Bounds: []float64{1}, Buckets: []uint64{1, 0}}}
	m := MergeMetrics(a[4:], c)
	if len(m) != 1 || m[0].Count != 4 || m[0].Buckets != nil || m[0].Bounds != nil {
		t.Errorf("different bounds: %+v", m)
	}
}

// A histogram's quantile is the upper bound of its bucket, capped by the
// maximum; above the last bound it is the maximum.
func TestMetricQuantile(t *testing.T) {
	h := Metric{Kind: MetricHistogram, Count: 100, Max: f(3), Bounds: []float64{0.01, 0.1, 1}, Buckets: []uint64{50, 40, 9, 1}}
	for _, tc := range []struct{ q, want float64 }{{0.5, 0.01}, {0.9, 0.1}, {0.99, 1}, {1, 3}} {
		if got, ok := h.Quantile(tc.q); !ok || got != tc.want {
			t.Errorf("q%v = %v, %v; want %v", tc.q, got, ok, tc.want)
		}
	}
	h.Max = f(0.05) // every value ≤ 0.05: the bucket's bound 0.1 overstates
	if got, _ := h.Quantile(0.9); got != 0.05 {
		t.Errorf("capped q0.9 = %v, want the maximum 0.05", got)
	}
	if _, ok := (Metric{Kind: MetricHistogram}).Quantile(0.5); ok {
		t.Error("an empty histogram has a quantile")
	}
}

// The text table and the HTML report show each approach's series,
// histograms in milliseconds, and say which approach recorded nothing; JSON
// carries them under "metrics", and a report without metrics prints no
// table.
func TestWriteMetrics(t *testing.T) {
	rep := Report{Scenario: "accounts", Clients: 4, Results: []Result{
		{Approach: FencedLock, Metrics: []Metric{
			{Name: "lockfree.fencedlock.fenced.rejections", Unit: "{write}", Kind: MetricCounter, Attrs: map[string]string{"lockfree.lock.prefix": "accounts/"}, Value: 3},
			{Name: "lockfree.fencedlock.wait.duration", Unit: "s", Kind: MetricHistogram, Count: 4, Sum: 0.2, Max: f(0.09), Bounds: []float64{0.01, 0.1}, Buckets: []uint64{2, 2, 0}},
		}},
		{Approach: Raw},
	}}
	var b strings.Builder
	WriteMetrics(&b, rep)
	out := b.String()
	for _, want := range []string{
		"accounts — metrics, summed over the 4 workers",
		"lockfree.fencedlock.fenced.rejections  lockfree.lock.prefix=accounts/  3 {write}",
		"n 4, mean 50ms, p99 ≤ 90ms, max 90ms",
		"raw          (none: no lockfree component)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	js, err := json.Marshal(rep.Results[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"metrics":[{"name":"lockfree.fencedlock.fenced.rejections","unit":"{write}","kind":"counter","attrs":{"lockfree.lock.prefix":"accounts/"},"value":3}`) {
		t.Errorf("JSON: %s", js)
	}
	var h strings.Builder
	if err := WriteHTML(&h, []Report{rep}, HTMLOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<h3>Metrics</h3>", "<td>lockfree.fencedlock.fenced.rejections</td><td>lockfree.lock.prefix=accounts/</td><td>3 {write}</td>", "(none: no lockfree component)"} {
		if !strings.Contains(h.String(), want) {
			t.Errorf("HTML: missing %q", want)
		}
	}
	b.Reset()
	WriteMetrics(&b, Report{Results: []Result{{Approach: Raw}}})
	if b.Len() != 0 {
		t.Errorf("a report without metrics printed %q", b.String())
	}
}
