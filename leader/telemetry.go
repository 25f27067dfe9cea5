package leader

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// The metrics of an Election (docs/leader.md, "Metrics"). Each carries
// lockfree.election, the election's name (without the prefix).
const (
	metricCampaign   = "lockfree.leader.campaign.duration"
	metricLeading    = "lockfree.leader.leading"
	metricTermsEnded = "lockfree.leader.terms.ended"
)

// electionTelemetry holds an Election's instruments and the attribute sets
// of each outcome, built once so that recording allocates nothing.
type electionTelemetry struct {
	tracer   telemetry.Tracer
	campaign metric.Float64Histogram
	leading  metric.Int64UpDownCounter
	terms    metric.Int64Counter

	won, canceled, failed                    telemetry.Attrs
	resigned, lost, expiring, maxed, stopped telemetry.Attrs
	election                                 telemetry.Attrs
}

func newTelemetry(c Config, name string) *electionTelemetry {
	in := telemetry.NewInstruments(c.MeterProvider, "leader")
	e := attribute.String(telemetry.Election, name)
	with := func(key, value string) telemetry.Attrs { return telemetry.NewAttrs(e, attribute.String(key, value)) }
	return &electionTelemetry{
		tracer:   telemetry.NewTracer(c.TracerProvider, "leader"),
		campaign: in.Duration(metricCampaign, "Time Campaign took, from its call to the term or its end, by outcome (elected, canceled, error)."),
		leading:  in.UpDown(metricLeading, "{term}", "Terms this process holds now: 1 while it leads the election, else 0."),
		terms:    in.Counter(metricTermsEnded, "{term}", "Terms that ended, by cause (resigned, lost, expiring, max_renewals, canceled)."),

		won: with(telemetry.Outcome, "elected"), canceled: with(telemetry.Outcome, "canceled"),
		failed:   with(telemetry.Outcome, "error"),
		resigned: with(telemetry.Cause, "resigned"), lost: with(telemetry.Cause, "lost"),
		expiring: with(telemetry.Cause, "expiring"), maxed: with(telemetry.Cause, "max_renewals"),
		stopped:  with(telemetry.Cause, "canceled"),
		election: telemetry.NewAttrs(e),
	}
}

// campaigned records how long a Campaign took and how it ended.
func (t *electionTelemetry) campaigned(ctx context.Context, start time.Time, err error) {
	a := t.won
	switch {
	case err != nil && ctx.Err() != nil:
		a = t.canceled
	case err != nil:
		a = t.failed
	}
	t.campaign.Record(ctx, time.Since(start).Seconds(), a.Record()...)
}

// elected counts a term that started.
func (t *electionTelemetry) elected(ctx context.Context) { t.leading.Add(ctx, 1, t.election.Add()...) }

// ended counts a term that ended, by the cause of its context.
func (t *electionTelemetry) ended(ctx context.Context, cause error) {
	a := t.stopped
	switch {
	case errors.Is(cause, ErrResigned):
		a = t.resigned
	case errors.Is(cause, fencedlock.ErrLost):
		a = t.lost
	case errors.Is(cause, fencedlock.ErrExpiring):
		a = t.expiring
	case errors.Is(cause, fencedlock.ErrMaxRenewals):
		a = t.maxed
	}
	t.leading.Add(ctx, -1, t.election.Add()...)
	t.terms.Add(ctx, 1, a.Add()...)
}
