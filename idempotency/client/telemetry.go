package client

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// The metrics of a Transport (docs/idempotency.md, "Metrics").
const (
	metricRetries = "lockfree.idempotency.client.retries"
	metricGiveUps = "lockfree.idempotency.client.give_ups"
)

// telemetryOf holds a Transport's instruments, with the attribute sets of
// its causes built once.
type telemetryOf struct {
	tracer          telemetry.Tracer
	retries         metric.Int64Counter
	giveUps         metric.Int64Counter
	network, status telemetry.Attrs
}

func newTelemetry(mp metric.MeterProvider, tp trace.TracerProvider) *telemetryOf {
	in := telemetry.NewInstruments(mp, "idempotency/client")
	return &telemetryOf{
		tracer:  telemetry.NewTracer(tp, "idempotency/client"),
		retries: in.Counter(metricRetries, "{retry}", "Attempts of a keyed request sent again, by cause (network: no answer; status: an answer asking for a retry)."),
		giveUps: in.Counter(metricGiveUps, "{request}", "Keyed requests whose last attempt still asked for a retry."),
		network: telemetry.NewAttrs(attribute.String(telemetry.Cause, "network")),
		status:  telemetry.NewAttrs(attribute.String(telemetry.Cause, "status")),
	}
}

// retried counts a retry, by what called for it.
func (t *telemetryOf) retried(ctx context.Context, resp *http.Response, err error) {
	if err != nil || resp == nil {
		t.retries.Add(ctx, 1, t.network.Add()...)
		return
	}
	t.retries.Add(ctx, 1, t.status.Add()...)
}
