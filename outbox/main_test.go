package outbox_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/testproc"
	"github.com/lockfree-go/lockfree/outbox"
)

var ctx = context.Background()

func TestMain(m *testing.M) {
	// One handler for the whole binary: tests run in parallel, and a
	// handler installed per test would replace another test's.
	failpoint.Handle(holdPaused)
	testproc.Main(m, map[string]testproc.Program{"relay": childRelay})
}

// pauseKey marks the context a relay was started with, so that holdPaused
// can hold that relay's heartbeats while the test's other relays run.
type pauseKey struct{}

// pauser holds a relay's membership heartbeats and steps while paused,
// and pauses the relay at its next delete once armed (atMark).
type pauser struct {
	mu     sync.Mutex
	gate   chan struct{} // nil while running
	atMark chan struct{} // armed: closed when the relay paused before a delete
}

// pauseAtMark arms p: the relay's next batch, once published, pauses it
// before its delete, with its heartbeats, and closes reached. resume ends
// the pause.
func (p *pauser) pauseAtMark() (reached <-chan struct{}, resume func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.atMark = make(chan struct{})
	return p.atMark, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.gate != nil {
			close(p.gate)
			p.gate = nil
		}
	}
}

// mark pauses the relay if p is armed.
func (p *pauser) mark() {
	p.mu.Lock()
	if p.atMark != nil {
		p.gate = make(chan struct{})
		close(p.atMark)
		p.atMark = nil
	}
	p.mu.Unlock()
	p.wait()
}

func (p *pauser) pause() (resume func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gate := make(chan struct{})
	p.gate = gate
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.gate == gate {
			close(gate)
			p.gate = nil
		}
	}
}

func (p *pauser) wait() {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

func holdPaused(ctx context.Context, name string) {
	p, ok := ctx.Value(pauseKey{}).(*pauser)
	if !ok {
		return
	}
	switch name {
	case "partition.member.heartbeat", "partition.member.reconcile":
		p.wait()
	case "outbox.relay.before-mark":
		p.mark()
	}
}

// childRelay runs a relay in a child process, as CHILD_MODE says:
// "stop-before-publish" stops the process (SIGSTOP) at its first batch,
// before the publish; "hang-before-mark" hangs at its first batch after
// the publish, before the delete, until killed. It reports "started", then
// "stopping" or "published" at that point, then "gave up: fenced" (or "moved") once a
// delete was refused or "gave up: failed" once a batch failed.
func childRelay(in *bufio.Scanner, out io.Writer) error {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	pool, err := pgxpool.New(ctx, os.Getenv("CHILD_DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	parts, _ := strconv.Atoi(os.Getenv("CHILD_PARTITIONS"))
	store, err := outbox.NewPostgres(pool, &outbox.PostgresConfig{Partitions: parts})
	if err != nil {
		return err
	}
	var once sync.Once
	switch mode := os.Getenv("CHILD_MODE"); mode {
	case "stop-before-publish":
		failpoint.Handle(failpoint.At("outbox.relay.before-publish", func(context.Context, string) {
			once.Do(func() {
				say("stopping")
				failpoint.StopProcess()(ctx, "")
			})
		}))
	case "hang-before-mark":
		failpoint.Handle(failpoint.At("outbox.relay.before-mark", func(context.Context, string) {
			once.Do(func() { say("published") })
			select {} // until killed
		}))
	default:
		return errors.New("unknown CHILD_MODE " + mode)
	}
	r, err := outbox.NewRelay(store, strings.Split(os.Getenv("CHILD_BROKERS"), ","), os.Getenv("CHILD_TOPIC"),
		relayConfig(os.Getenv("CHILD_NAME")))
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	say("started")
	go func() {
		for {
			switch s := r.Stats(); {
			case s.Fenced > 0:
				say("gave up: fenced, %+v", s)
				return
			case s.Failed > 0:
				say("gave up: failed, %+v", s)
				return
			case s.Moved > 0:
				say("gave up: moved, %+v", s)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	for in.Scan() { // until the test closes stdin or kills the child
	}
	return r.Stop(ctx)
}
