package partition_test

import (
	"context"
	"sync"
	"testing"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/testproc"
	"github.com/lockfree-go/lockfree/partition"
)

func TestMain(m *testing.M) {
	// One handler for the whole binary: tests run in parallel, and a
	// handler installed per test would replace another test's.
	failpoint.Handle(holdPaused)
	testproc.Main(m, map[string]testproc.Program{"paused-member": pausedMember})
}

// pauseKey marks the context a member was started with, so that
// holdPaused can stop that member's heartbeats and steps, as a process
// pause would, while the test's other members run.
type pauseKey struct{}

// pauser holds a member's background work while paused.
type pauser struct {
	mu   sync.Mutex
	gate chan struct{} // nil while running; closed on resume
}

// pause holds the member's heartbeats and steps from their next inject
// point on, until resume is called.
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
	switch name {
	case "partition.member.heartbeat", "partition.member.reconcile":
		if p, ok := ctx.Value(pauseKey{}).(*pauser); ok {
			p.wait()
		}
	}
}

// startMember creates and starts a member of store under cfg, to be stopped
// when the test ends, and returns its pauser.
func startMember(t testing.TB, store partition.Membership, cfg partition.Config) (*partition.Member, *pauser) {
	t.Helper()
	m, err := partition.NewMember(store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &pauser{}
	if err := m.Start(context.WithValue(ctx, pauseKey{}, p)); err != nil {
		t.Fatalf("Start(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() { m.Stop(ctx) })
	return m, p
}

// newMemory returns a memory store on c (nil: the system clock).
func newMemory(c clock.Clock) *partition.Memory {
	s, err := partition.NewMemory(&partition.MemoryConfig{Clock: c})
	if err != nil {
		panic(err) // every MemoryConfig is valid
	}
	return s
}
