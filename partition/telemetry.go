package partition

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// The metrics of a Member (docs/partition.md, "Metrics"). Partitions and
// epochs never go on a metric.
const (
	metricOwned       = "lockfree.partition.owned"
	metricStopped     = "lockfree.partition.stops"
	metricHandovers   = "lockfree.partition.handovers"
	metricUnowned     = "lockfree.partition.handover.duration"
	metricRefused     = "lockfree.partition.calls.refused"
	metricForwards    = "lockfree.partition.forwards"
	metricStaleEpochs = "lockfree.partition.stale_epochs"
)

// memberTelemetry holds a Member's instruments and the attribute sets of
// its outcomes, built once.
type memberTelemetry struct {
	tracer      telemetry.Tracer
	owned       metric.Int64UpDownCounter
	stops       metric.Int64Counter
	handovers   metric.Int64Counter
	unowned     metric.Float64Histogram
	refused     metric.Int64Counter
	forwards    metric.Int64Counter
	staleEpochs metric.Int64Counter

	byReason                     map[string]telemetry.Attrs // Stopped events
	notOwner, moving, notRunning telemetry.Attrs
}

func newMemberTelemetry(c Config) *memberTelemetry {
	in := telemetry.NewInstruments(c.MeterProvider, "partition")
	cause := func(v string) telemetry.Attrs { return telemetry.NewAttrs(attribute.String(telemetry.Cause, v)) }
	return &memberTelemetry{
		tracer:      telemetry.NewTracer(c.TracerProvider, "partition"),
		owned:       in.UpDown(metricOwned, "{partition}", "Partitions the member accepts work for."),
		stops:       in.Counter(metricStopped, "{partition}", "Partitions the member stopped serving, by cause (handoff, superseded, lease_lost, stopped)."),
		handovers:   in.Counter(metricHandovers, "{partition}", "Partitions the member claimed that another member owned or had owned."),
		unowned:     in.Duration(metricUnowned, "Per handover, from when the member first saw the partition placed on it, owned by another, until it claimed it."),
		refused:     in.Counter(metricRefused, "{call}", "Calls of Do not served here, by cause (not_owner, moving, stopped)."),
		forwards:    in.Counter(metricForwards, "{request}", "Requests Forward proxied to the owner of their key."),
		staleEpochs: in.Counter(metricStaleEpochs, "{write}", "Functions run by Do that returned a stale-epoch rejection (ErrStaleEpoch) from the resource."),
		byReason: map[string]telemetry.Attrs{
			ReasonHandoff: cause("handoff"), ReasonSuperseded: cause("superseded"),
			ReasonLeaseLost: cause("lease_lost"), ReasonStopped: cause("stopped"),
		},
		notOwner: cause("not_owner"), moving: cause("moving"), notRunning: cause("stopped"),
	}
}

// event counts a partition's start or stop.
func (t *memberTelemetry) event(e Event) {
	ctx := context.Background()
	switch e.Kind {
	case Started:
		t.owned.Add(ctx, 1)
	case Stopped:
		t.owned.Add(ctx, -1)
		t.stops.Add(ctx, 1, t.byReason[e.Reason].Add()...)
	}
}

// called counts what Do's error says: a call refused here, or a write the
// resource fenced by epoch.
func (t *memberTelemetry) called(ctx context.Context, err error) {
	switch {
	case err == nil:
	case errors.Is(err, ErrNotOwner):
		t.refused.Add(ctx, 1, t.notOwner.Add()...)
	case errors.Is(err, ErrMoving):
		t.refused.Add(ctx, 1, t.moving.Add()...)
	case errors.Is(err, ErrStopped):
		t.refused.Add(ctx, 1, t.notRunning.Add()...)
	case errors.Is(err, ErrStaleEpoch):
		t.staleEpochs.Add(ctx, 1)
	}
}

// claimed records a handover: the partition was placed on the member, owned
// by another, since since.
func (t *memberTelemetry) claimed(since time.Time) {
	ctx := context.Background()
	t.handovers.Add(ctx, 1)
	t.unowned.Record(ctx, time.Since(since).Seconds())
}
