package report

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// MetricKind is how a Metric's points combine over worker processes.
type MetricKind string

// The kinds of Metric.
const (
	// MetricCounter is a monotonic count: Value is the total, summed over
	// the workers.
	MetricCounter MetricKind = "counter"
	// MetricUpDown is a count that goes up and down (partitions owned):
	// Value is its value when each worker reported, summed over the
	// workers — the fleet's total.
	MetricUpDown MetricKind = "updown"
	// MetricGauge is a sampled value: Value is the highest any worker
	// reported.
	MetricGauge MetricKind = "gauge"
	// MetricHistogram is a distribution: Count, Sum, Min, Max and the
	// Buckets over Bounds, merged over the workers.
	MetricHistogram MetricKind = "histogram"
)

// Metric is one series the lockfree components of an approach recorded
// during a run (`lockfree compare --metrics`): the metric a user's
// MeterProvider would receive in production, with its attributes, merged
// over the approach's worker processes. The JSON field names are part of
// the public report.
type Metric struct {
	Name  string            `json:"name"`
	Unit  string            `json:"unit,omitempty"`
	Kind  MetricKind        `json:"kind"`
	Attrs map[string]string `json:"attrs,omitempty"`
	// Value is a counter's, an up-down counter's or a gauge's value (see
	// MetricKind); 0 for a histogram.
	Value float64 `json:"value"`
	// Count, Sum, Min and Max describe a histogram's values; Buckets[i]
	// counts those ≤ Bounds[i] (and > Bounds[i-1]), the last bucket those
	// above every bound.
	Count   uint64    `json:"count,omitempty"`
	Sum     float64   `json:"sum,omitempty"`
	Min     *float64  `json:"min,omitempty"`
	Max     *float64  `json:"max,omitempty"`
	Bounds  []float64 `json:"bounds,omitempty"`
	Buckets []uint64  `json:"buckets,omitempty"`
}

// series identifies a Metric's series: its name and attributes.
func (m Metric) series() string {
	var b strings.Builder
	b.WriteString(m.Name)
	for _, k := range slices.Sorted(maps.Keys(m.Attrs)) {
		fmt.Fprintf(&b, "\x00%s=%s", k, m.Attrs[k])
	}
	return b.String()
}

// MergeMetrics returns the series of a and b merged, each series once,
// sorted by name and attributes: counters and up-down counters add, gauges
// keep the highest value, histograms add their counts, sums and buckets
// (buckets over different bounds are dropped) and keep the lowest minimum
// and the highest maximum. Neither a nor b is modified.
func MergeMetrics(a, b []Metric) []Metric {
	byKey := map[string]Metric{}
	for _, ms := range [][]Metric{a, b} {
		for _, m := range ms {
			k := m.series()
			if prev, ok := byKey[k]; ok {
				byKey[k] = merge(prev, m)
			} else {
				byKey[k] = clone(m)
			}
		}
	}
	out := slices.Collect(maps.Values(byKey))
	slices.SortFunc(out, func(x, y Metric) int { return cmp.Compare(x.series(), y.series()) })
	return out
}

func clone(m Metric) Metric {
	m.Attrs = maps.Clone(m.Attrs)
	m.Bounds, m.Buckets = slices.Clone(m.Bounds), slices.Clone(m.Buckets)
	return m
}

// merge merges the points of one series; a keeps its name, unit and kind.
func merge(a, b Metric) Metric {
	switch a.Kind {
	case MetricGauge:
		a.Value = max(a.Value, b.Value)
		return a
	case MetricHistogram:
	default:
		a.Value += b.Value
		return a
	}
	a.Count += b.Count
	a.Sum += b.Sum
	a.Min = pick(a.Min, b.Min, math.Min)
	a.Max = pick(a.Max, b.Max, math.Max)
	if !slices.Equal(a.Bounds, b.Bounds) || len(a.Buckets) != len(b.Buckets) {
		a.Bounds, a.Buckets = nil, nil
		return a
	}
	for i := range a.Buckets {
		a.Buckets[i] += b.Buckets[i]
	}
	return a
}

func pick(a, b *float64, f func(x, y float64) float64) *float64 {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	v := f(*a, *b)
	return &v
}

// Quantile returns an upper bound of a histogram's q-quantile (0 < q ≤ 1):
// the upper bound of the bucket that holds it, or the maximum when that is
// lower or the bucket has no upper bound. The bool is false when the
// histogram has no value or no buckets.
func (m Metric) Quantile(q float64) (float64, bool) {
	if m.Count == 0 || len(m.Buckets) == 0 || len(m.Buckets) != len(m.Bounds)+1 {
		return 0, false
	}
	rank := uint64(math.Ceil(q * float64(m.Count)))
	var seen uint64
	for i, n := range m.Buckets {
		seen += n
		if seen < rank {
			continue
		}
		if i < len(m.Bounds) && (m.Max == nil || m.Bounds[i] < *m.Max) {
			return m.Bounds[i], true
		}
		break
	}
	if m.Max != nil {
		return *m.Max, true
	}
	return 0, false
}

// text is the metric's value as the table shows it: a count, or a
// histogram's count, mean, p99 bound and maximum in the metric's unit
// (seconds shown as milliseconds).
func (m Metric) text() string {
	if m.Kind != MetricHistogram {
		return fmt.Sprintf("%s %s", trimFloat(m.Value), m.Unit)
	}
	if m.Count == 0 {
		return "n 0"
	}
	unit, scale := " "+m.Unit, 1.0
	if m.Unit == "s" {
		unit, scale = "ms", 1000
	}
	v := func(x float64) string { return strings.TrimSpace(trimFloat(x*scale) + unit) }
	s := fmt.Sprintf("n %d, mean %s", m.Count, v(m.Sum/float64(m.Count)))
	if p, ok := m.Quantile(0.99); ok {
		s += ", p99 ≤ " + v(p)
	}
	if m.Max != nil {
		s += ", max " + v(*m.Max)
	}
	return s
}

// trimFloat prints x as an integer from 100 up, else with 3 significant
// digits.
func trimFloat(x float64) string {
	if math.Abs(x) >= 100 || x == math.Trunc(x) {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.3g", x)
}

// attrsText is "k=v k=v", sorted, or "—".
func attrsText(a map[string]string) string {
	if len(a) == 0 {
		return "—"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		parts = append(parts, k+"="+a[k])
	}
	return strings.Join(parts, " ")
}

// HasMetrics reports whether any result of the report carries metrics.
func (rep Report) HasMetrics() bool {
	return slices.ContainsFunc(rep.Results, func(r Result) bool { return len(r.Metrics) > 0 })
}

// WriteMetrics writes, per approach of the report, the metrics its lockfree
// components recorded, one series a line; an approach that recorded none
// (it uses no lockfree component) says so. It writes nothing when the run
// collected no metrics.
func WriteMetrics(w io.Writer, rep Report) {
	if !rep.HasMetrics() {
		return
	}
	fmt.Fprintf(w, "\n%s — metrics, summed over the %d workers of each approach (warm-up included)\n", rep.Scenario, rep.Clients)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "approach\tmetric\tattributes\tvalue")
	for _, r := range rep.Results {
		switch {
		case !r.Ran():
			continue
		case len(r.Metrics) == 0:
			fmt.Fprintf(tw, "%s\t(none: no lockfree component)\t\t\n", r.Approach)
		}
		for _, m := range r.Metrics {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Approach, m.Name, attrsText(m.Attrs), m.text())
		}
	}
	tw.Flush()
}
