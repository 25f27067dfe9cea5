package singlewriter

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// The metrics of an Actor or a Group (docs/singlewriter.md, "Metrics"). The
// shards of a Group share them: keys and shards never go on a metric.
const (
	metricCommands = "lockfree.singlewriter.commands"
	metricWait     = "lockfree.singlewriter.queue.duration"
	metricDepth    = "lockfree.singlewriter.mailbox.depth"
)

// spanDo is the span of Actor.Do (and so of Group.Do and Ask).
const spanDo = "singlewriter.Do"

// The outcomes of a command (lockfree.outcome).
const (
	outcomeApplied   = "applied"   // fn returned nil
	outcomeError     = "error"     // fn returned an error
	outcomePanic     = "panic"     // fn panicked: recovered, the actor goes on
	outcomeGoexit    = "goexit"    // fn called runtime.Goexit: contained likewise
	outcomeStopped   = "stopped"   // refused: the actor was stopping
	outcomeCancelled = "cancelled" // the submitter's context ended before fn started
)

// actorTelemetry holds the instruments of an Actor, or of every shard of a
// Group, and the attribute sets of its outcomes, built once.
type actorTelemetry struct {
	tracer   telemetry.Tracer
	commands metric.Int64Counter
	wait     metric.Float64Histogram
	depth    metric.Int64UpDownCounter
	// timed: a MeterProvider was given, so the queue wait is worth two
	// clock reads per command.
	timed    bool
	outcomes map[string]telemetry.Attrs
}

func newActorTelemetry(c ActorConfig) *actorTelemetry {
	in := telemetry.NewInstruments(c.MeterProvider, "singlewriter")
	t := &actorTelemetry{
		tracer: telemetry.NewTracer(c.TracerProvider, "singlewriter"),
		commands: in.Counter(metricCommands, "{command}",
			"Commands submitted to the actors, by outcome (applied, error, panic, goexit, stopped, cancelled)."),
		wait: in.Duration(metricWait,
			"Per command started, how long it waited in its actor's mailbox."),
		depth: in.UpDown(metricDepth, "{command}",
			"Commands accepted into the mailboxes and not yet started or cancelled."),
		timed:    c.MeterProvider != nil,
		outcomes: map[string]telemetry.Attrs{},
	}
	for _, o := range []string{outcomeApplied, outcomeError, outcomePanic, outcomeGoexit, outcomeStopped, outcomeCancelled} {
		t.outcomes[o] = telemetry.NewAttrs(attribute.String(telemetry.Outcome, o))
	}
	return t
}

// now is the time a command was accepted or started, when it is measured.
func (t *actorTelemetry) now() time.Time {
	if !t.timed {
		return time.Time{}
	}
	return time.Now()
}

// accepted counts a command placed in the mailbox.
func (t *actorTelemetry) accepted() { t.depth.Add(context.Background(), 1) }

// started counts a command leaving the mailbox to run, accepted at since.
func (t *actorTelemetry) started(since time.Time) {
	ctx := context.Background()
	t.depth.Add(ctx, -1)
	if t.timed {
		t.wait.Record(ctx, time.Since(since).Seconds())
	}
}

// skipped counts a command the actor reached after its submitter had
// given up on it: it leaves the mailbox unrun.
func (t *actorTelemetry) skipped() { t.depth.Add(context.Background(), -1) }

// ranOutcome names a started command's outcome by what it returned.
func ranOutcome(err error) string {
	switch {
	case err == nil:
		return outcomeApplied
	case errors.Is(err, ErrPanic):
		return outcomePanic
	case errors.Is(err, ErrGoexit):
		return outcomeGoexit
	}
	return outcomeError
}

// outcome counts a command by its outcome.
func (t *actorTelemetry) outcome(o string) {
	t.commands.Add(context.Background(), 1, t.outcomes[o].Add()...)
}

// failed says whether a command's outcome is a failure of its span:
// refusals (stopped) and a submitter's ended context are outcomes, not
// failures.
func failed(outcome string) bool {
	return outcome == outcomeError || outcome == outcomePanic || outcome == outcomeGoexit
}
