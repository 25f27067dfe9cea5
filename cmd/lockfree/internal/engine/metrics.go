package engine

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// workerMeter is the MeterProvider of a worker whose run collects metrics
// (Config.Metrics): the SDK's, read once by a ManualReader when the worker
// reports its stats, so that the report shows what a user's provider would
// receive in production from the same components.
type workerMeter struct {
	provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

// newWorkerMeter returns the meter of a worker that collects metrics, and
// nil for one that does not.
func newWorkerMeter(collect bool) *workerMeter {
	if !collect {
		return nil
	}
	r := sdkmetric.NewManualReader()
	return &workerMeter{provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)), reader: r}
}

// meterProvider is Env.MeterProvider: nil (no interface holding a nil
// pointer) when the worker collects nothing, so that the components record
// nothing.
func (m *workerMeter) meterProvider() metric.MeterProvider {
	if m == nil {
		return nil
	}
	return m.provider
}

// collect returns what the worker's components recorded so far; nil when it
// collects nothing.
func (m *workerMeter) collect(ctx context.Context) ([]report.Metric, error) {
	if m == nil {
		return nil, nil
	}
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(ctx, &rm); err != nil {
		return nil, fmt.Errorf("engine: collecting the metrics: %w", err)
	}
	var out []report.Metric
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			out = append(out, toMetrics(md)...)
		}
	}
	return report.MergeMetrics(nil, out), nil
}

// toMetrics converts the points of one SDK metric, one report.Metric per
// point (attribute set).
func toMetrics(md metricdata.Metrics) []report.Metric {
	base := report.Metric{Name: md.Name, Unit: md.Unit}
	var out []report.Metric
	switch d := md.Data.(type) {
	case metricdata.Sum[int64]:
		out = valuePoints(base, sumKind(d.IsMonotonic), d.DataPoints)
	case metricdata.Sum[float64]:
		out = valuePoints(base, sumKind(d.IsMonotonic), d.DataPoints)
	case metricdata.Gauge[int64]:
		out = valuePoints(base, report.MetricGauge, d.DataPoints)
	case metricdata.Gauge[float64]:
		out = valuePoints(base, report.MetricGauge, d.DataPoints)
	case metricdata.Histogram[int64]:
		out = histogramPoints(base, d.DataPoints)
	case metricdata.Histogram[float64]:
		out = histogramPoints(base, d.DataPoints)
	}
	return out
}

func sumKind(monotonic bool) report.MetricKind {
	if monotonic {
		return report.MetricCounter
	}
	return report.MetricUpDown
}

func valuePoints[N int64 | float64](base report.Metric, kind report.MetricKind, ps []metricdata.DataPoint[N]) []report.Metric {
	base.Kind = kind
	out := make([]report.Metric, 0, len(ps))
	for _, p := range ps {
		m := base
		m.Attrs, m.Value = attrMap(p.Attributes), float64(p.Value)
		out = append(out, m)
	}
	return out
}

func histogramPoints[N int64 | float64](base report.Metric, ps []metricdata.HistogramDataPoint[N]) []report.Metric {
	base.Kind = report.MetricHistogram
	out := make([]report.Metric, 0, len(ps))
	for _, p := range ps {
		m := base
		m.Attrs, m.Count, m.Sum = attrMap(p.Attributes), p.Count, float64(p.Sum)
		if v, ok := p.Min.Value(); ok {
			f := float64(v)
			m.Min = &f
		}
		if v, ok := p.Max.Value(); ok {
			f := float64(v)
			m.Max = &f
		}
		m.Bounds, m.Buckets = append([]float64(nil), p.Bounds...), append([]uint64(nil), p.BucketCounts...)
		out = append(out, m)
	}
	return out
}

func attrMap(s attribute.Set) map[string]string {
	if s.Len() == 0 {
		return nil
	}
	m := make(map[string]string, s.Len())
	for _, kv := range s.ToSlice() {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}
