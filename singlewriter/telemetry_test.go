package singlewriter_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/singlewriter"
)

const (
	metricCommands = "lockfree.singlewriter.commands"
	metricWait     = "lockfree.singlewriter.queue.duration"
	metricDepth    = "lockfree.singlewriter.mailbox.depth"
)

func outcome(v string) attribute.KeyValue { return attribute.String(telemetry.Outcome, v) }

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A group's commands are counted by outcome — applied, failed, panicked
// (recovered), exited, cancelled in the mailbox, refused after Stop — the
// commands waiting behind a busy actor show as the mailbox's depth, each
// started command's wait is recorded, and each Do is a span with its
// outcome.
func TestGroupMetricsAndSpans(t *testing.T) {
	t.Parallel()
	tel := telemetrytest.New(t)
	g, err := singlewriter.NewGroup(2, func(int) int { return 0 }, &singlewriter.ActorConfig{
		MeterProvider: tel.Meters, TracerProvider: tel.Tracers,
	})
	if err != nil {
		t.Fatal(err)
	}
	key := "k"
	mustDo := func(fn func(*int) error) error { return g.Do(ctx, key, fn) }
	if err := mustDo(func(n *int) error { *n++; return nil }); err != nil {
		t.Fatal(err)
	}
	errUser := errors.New("refused by the command")
	if err := mustDo(func(*int) error { return errUser }); !errors.Is(err, errUser) {
		t.Fatalf("got %v, want the command's error", err)
	}
	if err := mustDo(func(*int) error { panic("boom") }); !errors.Is(err, singlewriter.ErrPanic) {
		t.Fatalf("got %v, want ErrPanic", err)
	}
	if err := mustDo(func(*int) error { runtime.Goexit(); return nil }); !errors.Is(err, singlewriter.ErrGoexit) {
		t.Fatalf("got %v, want ErrGoexit", err)
	}

	// Hold the actor busy: three commands wait behind the running one, the
	// last of them cancelled by its submitter before it starts.
	running, release := make(chan struct{}), make(chan struct{})
	busy := make(chan error, 1)
	go func() { busy <- mustDo(func(*int) error { close(running); <-release; return nil }) }()
	<-running
	waiting := make(chan error, 2)
	for range 2 {
		go func() { waiting <- mustDo(func(n *int) error { *n++; return nil }) }()
	}
	cctx, cancel := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() { cancelled <- g.Do(cctx, key, func(*int) error { return nil }) }()
	waitFor(t, "three commands in the mailbox", func() bool { return tel.Sum(t, metricDepth) == 3 })
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled command: got %v", err)
	}
	close(release)
	for _, ch := range []chan error{busy, waiting, waiting} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mustDo(func(*int) error { return nil }); !errors.Is(err, singlewriter.ErrStopped) {
		t.Fatalf("after Stop: got %v, want ErrStopped", err)
	}

	want := map[string]int64{"applied": 4, "error": 1, "panic": 1, "goexit": 1, "cancelled": 1, "stopped": 1}
	for o, n := range want {
		if got := tel.Sum(t, metricCommands, outcome(o)); got != n {
			t.Errorf("%s{outcome=%s} = %d, want %d\n%s", metricCommands, o, got, n, tel.Describe(t))
		}
	}
	if d := tel.Sum(t, metricDepth); d != 0 {
		t.Errorf("mailbox depth %d after the drain, want 0", d)
	}
	// Every started command waited in the mailbox: 4 applied, 1 error, 1
	// panic, 1 goexit.
	if n, _ := tel.Count(t, metricWait); n != 7 {
		t.Errorf("%s counted %d waits, want 7", metricWait, n)
	}
	checkDoSpans(t, tel, want)
}

// checkDoSpans checks that every Do was one span with its outcome, failed
// only when its command failed.
func checkDoSpans(t *testing.T, tel *telemetrytest.Telemetry, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	for _, s := range tel.SpansNamed("singlewriter.Do") {
		v, _ := telemetrytest.Attr(s, telemetry.Outcome)
		o := v.AsString()
		got[o]++
		if isErr := s.Status.Code == codes.Error; isErr != (o == "error" || o == "panic" || o == "goexit") {
			t.Errorf("span with outcome %s: status %v", o, s.Status)
		}
	}
	for o, n := range want {
		if got[o] != n {
			t.Errorf("%d spans with outcome %s, want %d (all: %v)", got[o], o, n, got)
		}
	}
}

// Recording a command's metrics allocates nothing: Do allocates as often
// with a recording meter as with none.
func TestActorMetricsAllocateNothing(t *testing.T) {
	a := mustActor(t, 0, nil)
	defer a.Stop(ctx)
	fn := func(n *int) error { *n++; return nil }
	base := testing.AllocsPerRun(200, func() { _ = a.Do(ctx, fn) })
	tel := telemetrytest.New(t)
	b := mustActor(t, 0, &singlewriter.ActorConfig{MeterProvider: tel.Meters})
	defer b.Stop(ctx)
	with := testing.AllocsPerRun(200, func() { _ = b.Do(ctx, fn) })
	if with != base {
		t.Errorf("Do allocates %v times with a recording meter, %v without: recording must allocate nothing", with, base)
	}
}
