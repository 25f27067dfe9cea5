package outbox

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// The metrics of a Relay (docs/outbox.md, "Metrics"), each with
// lockfree.topic. Partitions and epochs go on spans and log lines only.
const (
	metricPublished = "lockfree.outbox.events.published"
	metricBatches   = "lockfree.outbox.batches"
	metricFailures  = "lockfree.outbox.failures"
	metricFenced    = "lockfree.outbox.fenced"
	metricDelay     = "lockfree.outbox.delay"
)

// relayTelemetry is a Relay's instruments, with its attribute sets built
// once.
type relayTelemetry struct {
	tracer    telemetry.Tracer
	published metric.Int64Counter
	batches   metric.Int64Counter
	failures  metric.Int64Counter
	fenced    metric.Int64Counter
	delay     metric.Float64Histogram

	topic                              telemetry.Attrs
	refusedFail, uncertainFail, dbFail telemetry.Attrs
}

func newRelayTelemetry(c RelayConfig, topic string) *relayTelemetry {
	in := telemetry.NewInstruments(c.MeterProvider, "outbox")
	t := attribute.String(telemetry.Topic, topic)
	cause := func(v string) telemetry.Attrs { return telemetry.NewAttrs(t, attribute.String(telemetry.Cause, v)) }
	return &relayTelemetry{
		tracer:        telemetry.NewTracer(c.TracerProvider, "outbox"),
		published:     in.Counter(metricPublished, "{event}", "Events published and deleted from the outbox."),
		batches:       in.Counter(metricBatches, "{batch}", "Batches published and deleted, each one partition's."),
		failures:      in.Counter(metricFailures, "{batch}", "Batches that failed and are published again, by cause: refused (Kafka wrote nothing), uncertain (the batch may have been written: copies) or database."),
		fenced:        in.Counter(metricFenced, "{batch}", "Batches whose delete a newer owner of the partition refused: published, maybe twice; the relay gave the partition up."),
		delay:         in.Duration(metricDelay, "Per batch, from when its oldest event was written until the batch was published, by the relay's clock against the store's (their skew adds to it)."),
		topic:         telemetry.NewAttrs(t),
		refusedFail:   cause("refused"),
		uncertainFail: cause("uncertain"),
		dbFail:        cause("database"),
	}
}

// done counts a batch of n events published and deleted, the oldest
// written delay seconds before.
func (t *relayTelemetry) done(ctx context.Context, n int, delay float64) {
	t.batches.Add(ctx, 1, t.topic.Add()...)
	t.published.Add(ctx, int64(n), t.topic.Add()...)
	t.delay.Record(ctx, max(delay, 0), t.topic.Record()...)
}
