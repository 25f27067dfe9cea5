package telemetrytest

import (
	"context"
	"fmt"
	"regexp"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
)

// validName is the API's instrument name syntax, which the SDK enforces.
var validName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_./-]{0,254}$`)

// stream is one instrument's points. Instruments of the same name share
// one stream, as the SDK aggregates identical instruments together. Its
// fields other than points never change; points is guarded by tel.mu.
type stream struct {
	tel    *Telemetry
	m      Metric // without Points
	points map[attribute.Distinct]*Point
}

// instrument returns the stream of the instrument name, created on first
// use. The error, reported as the API prescribes, is for a name outside the
// API's syntax (the stream still records, as the SDK's does) or for a name
// already created with another kind (the stream then records nowhere
// visible).
func (tel *Telemetry) instrument(scope, name, unit, desc string, kind Kind) (*stream, error) {
	tel.mu.Lock()
	defer tel.mu.Unlock()
	if s, ok := tel.streams[name]; ok {
		if s.m.Kind != kind {
			return tel.newStream(scope, name, unit, desc, kind),
				fmt.Errorf("telemetrytest: %s created as a %v, then as a %v", name, s.m.Kind, kind)
		}
		return s, nil
	}
	s := tel.newStream(scope, name, unit, desc, kind)
	tel.streams[name] = s
	tel.order = append(tel.order, s)
	if !validName.MatchString(name) {
		return s, fmt.Errorf("telemetrytest: invalid instrument name %q", name)
	}
	return s, nil
}

func (tel *Telemetry) newStream(scope, name, unit, desc string, kind Kind) *stream {
	return &stream{tel: tel, m: Metric{Scope: scope, Name: name, Unit: unit, Description: desc, Kind: kind},
		points: map[attribute.Distinct]*Point{}}
}

// point returns set's point; tel.mu is held. Once the point exists, a
// measurement allocates nothing, so tests can check the library's own
// allocations.
func (s *stream) point(set attribute.Set) *Point {
	p, ok := s.points[set.Equivalent()]
	if !ok {
		p = &Point{Attributes: set}
		s.points[set.Equivalent()] = p
	}
	return p
}

func (s *stream) add(v int64, opts []metric.AddOption) {
	set := metric.NewAddConfig(opts).Attributes()
	s.tel.mu.Lock()
	defer s.tel.mu.Unlock()
	s.point(set).Value += v
}

func (s *stream) record(v float64, opts []metric.RecordOption) {
	set := metric.NewRecordConfig(opts).Attributes()
	s.tel.mu.Lock()
	defer s.tel.mu.Unlock()
	p := s.point(set)
	p.Count++
	p.Sum += v
}

// snapshot copies the stream; tel.mu is held.
func (s *stream) snapshot() Metric {
	m := s.m
	for _, p := range s.points {
		m.Points = append(m.Points, *p)
	}
	return m
}

type meterProvider struct {
	embedded.MeterProvider
	tel *Telemetry
}

func (p meterProvider) Meter(name string, _ ...metric.MeterOption) metric.Meter {
	return meter{tel: p.tel, scope: name}
}

// meter creates the instruments the library uses and panics on the others.
type meter struct {
	embedded.Meter
	tel   *Telemetry
	scope string
}

func (m meter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	c := metric.NewInt64CounterConfig(opts...)
	s, err := m.tel.instrument(m.scope, name, c.Unit(), c.Description(), Counter)
	return sum{s: s}, err
}

func (m meter) Int64UpDownCounter(name string, opts ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	c := metric.NewInt64UpDownCounterConfig(opts...)
	s, err := m.tel.instrument(m.scope, name, c.Unit(), c.Description(), UpDownCounter)
	return sum{s: s}, err
}

func (m meter) Int64Histogram(name string, opts ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	c := metric.NewInt64HistogramConfig(opts...)
	s, err := m.tel.instrument(m.scope, name, c.Unit(), c.Description(), Histogram)
	return int64Histogram{s: s}, err
}

func (m meter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	c := metric.NewFloat64HistogramConfig(opts...)
	s, err := m.tel.instrument(m.scope, name, c.Unit(), c.Description(), Histogram)
	return float64Histogram{s: s}, err
}

func unsupported(kind, name string) string {
	return fmt.Sprintf("telemetrytest: %s %s: this kind of instrument is not recorded; add it to telemetrytest", kind, name)
}

func (meter) Int64Gauge(name string, _ ...metric.Int64GaugeOption) (metric.Int64Gauge, error) {
	panic(unsupported("Int64Gauge", name))
}

func (meter) Int64ObservableCounter(name string, _ ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	panic(unsupported("Int64ObservableCounter", name))
}

func (meter) Int64ObservableUpDownCounter(name string, _ ...metric.Int64ObservableUpDownCounterOption) (metric.Int64ObservableUpDownCounter, error) {
	panic(unsupported("Int64ObservableUpDownCounter", name))
}

func (meter) Int64ObservableGauge(name string, _ ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	panic(unsupported("Int64ObservableGauge", name))
}

func (meter) Float64Counter(name string, _ ...metric.Float64CounterOption) (metric.Float64Counter, error) {
	panic(unsupported("Float64Counter", name))
}

func (meter) Float64UpDownCounter(name string, _ ...metric.Float64UpDownCounterOption) (metric.Float64UpDownCounter, error) {
	panic(unsupported("Float64UpDownCounter", name))
}

func (meter) Float64Gauge(name string, _ ...metric.Float64GaugeOption) (metric.Float64Gauge, error) {
	panic(unsupported("Float64Gauge", name))
}

func (meter) Float64ObservableCounter(name string, _ ...metric.Float64ObservableCounterOption) (metric.Float64ObservableCounter, error) {
	panic(unsupported("Float64ObservableCounter", name))
}

func (meter) Float64ObservableUpDownCounter(name string, _ ...metric.Float64ObservableUpDownCounterOption) (metric.Float64ObservableUpDownCounter, error) {
	panic(unsupported("Float64ObservableUpDownCounter", name))
}

func (meter) Float64ObservableGauge(name string, _ ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	panic(unsupported("Float64ObservableGauge", name))
}

func (meter) RegisterCallback(metric.Callback, ...metric.Observable) (metric.Registration, error) {
	panic(unsupported("callback", "registration"))
}

// sum is an int64 counter or up-down counter.
type sum struct {
	embedded.Int64Counter
	embedded.Int64UpDownCounter
	s *stream
}

func (c sum) Add(_ context.Context, v int64, opts ...metric.AddOption) { c.s.add(v, opts) }
func (sum) Enabled(context.Context) bool                               { return true }

type int64Histogram struct {
	embedded.Int64Histogram
	s *stream
}

func (h int64Histogram) Record(_ context.Context, v int64, opts ...metric.RecordOption) {
	h.s.record(float64(v), opts)
}
func (int64Histogram) Enabled(context.Context) bool { return true }

type float64Histogram struct {
	embedded.Float64Histogram
	s *stream
}

func (h float64Histogram) Record(_ context.Context, v float64, opts ...metric.RecordOption) {
	h.s.record(v, opts)
}
func (float64Histogram) Enabled(context.Context) bool { return true }
