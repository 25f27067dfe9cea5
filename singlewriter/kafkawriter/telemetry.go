package kafkawriter

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// The metrics of a Consumer (docs/singlewriter.md, "Metrics"), each with
// lockfree.group and lockfree.topic. Partitions, epochs and offsets go on
// spans and log lines only.
const (
	metricApplied      = "lockfree.kafkawriter.events.applied"
	metricBatches      = "lockfree.kafkawriter.batches"
	metricRejections   = "lockfree.kafkawriter.inbox.rejections"
	metricFailures     = "lockfree.kafkawriter.handler.failures"
	metricDeadLettered = "lockfree.kafkawriter.dead_lettered"
	metricLag          = "lockfree.kafkawriter.lag"
	metricClaims       = "lockfree.kafkawriter.claims"
	metricDuplicates   = "lockfree.kafkawriter.duplicates"
)

// consumerTelemetry is a Consumer's instruments, with its attribute sets
// built once.
type consumerTelemetry struct {
	tracer       telemetry.Tracer
	applied      metric.Int64Counter
	batches      metric.Int64Counter
	rejections   metric.Int64Counter
	failures     metric.Int64Counter
	deadLettered metric.Int64Counter
	lag          metric.Int64Histogram
	claims       metric.Int64Counter
	dups         metric.Int64Counter

	source              telemetry.Attrs
	zombie, staleOffset telemetry.Attrs
	dupID, dupSeq       telemetry.Attrs
}

func newConsumerTelemetry(c ConsumerConfig, src Source) *consumerTelemetry {
	in := telemetry.NewInstruments(c.MeterProvider, "singlewriter/kafkawriter")
	g, t := attribute.String(telemetry.Group, src.GroupID), attribute.String(telemetry.Topic, src.Topic)
	cause := func(v string) telemetry.Attrs { return telemetry.NewAttrs(g, t, attribute.String(telemetry.Cause, v)) }
	return &consumerTelemetry{
		tracer:       telemetry.NewTracer(c.TracerProvider, "singlewriter/kafkawriter"),
		applied:      in.Counter(metricApplied, "{event}", "Messages applied: their handler's writes committed with the inbox's offset."),
		batches:      in.Counter(metricBatches, "{transaction}", "Transactions committed, each one batch of messages."),
		rejections:   in.Counter(metricRejections, "{transaction}", "Transactions the inbox rejected, by cause: fenced (a zombie: a newer owner claimed the partition) or stale_offset (already applied)."),
		failures:     in.Counter(metricFailures, "{attempt}", "Failed attempts of the handler (a batch, or one message)."),
		deadLettered: in.Counter(metricDeadLettered, "{message}", "Messages sent to the dead-letter topic after MaxAttempts failures."),
		lag: in.Histogram(metricLag, "{message}", "Per committed transaction, how many messages of its partition were left behind it (high watermark − next offset).",
			0, 1, 10, 100, 1000, 10000, 100000, 1000000),
		claims:      in.Counter(metricClaims, "{partition}", "Partitions claimed in the inbox, each with a new epoch."),
		dups:        in.Counter(metricDuplicates, "{message}", "Messages Dedupe dropped, by cause: event_id (the event was applied before) or sequence (not above the entity's highest applied)."),
		source:      telemetry.NewAttrs(g, t),
		zombie:      cause("fenced"),
		staleOffset: cause("stale_offset"),
		dupID:       cause("event_id"),
		dupSeq:      cause("sequence"),
	}
}

// committed counts a committed transaction of n messages that left lag
// messages behind it.
func (t *consumerTelemetry) committed(ctx context.Context, n, lag int64) {
	t.batches.Add(ctx, 1, t.source.Add()...)
	t.applied.Add(ctx, n, t.source.Add()...)
	t.lag.Record(ctx, max(lag, 0), t.source.Record()...)
}

// duplicates counts the messages Dedupe dropped from a committed
// transaction.
func (t *consumerTelemetry) duplicates(ctx context.Context, d dedupeCounts) {
	if d.byID > 0 {
		t.dups.Add(ctx, int64(d.byID), t.dupID.Add()...)
	}
	if d.bySeq > 0 {
		t.dups.Add(ctx, int64(d.bySeq), t.dupSeq.Add()...)
	}
}
