package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"
)

// A worker that drained keeps its client — its consumer in the group —
// until the coordinator lets it leave, and the coordinator does so once
// every worker has drained (reported its stats) or exited: a member that
// left earlier made the group rebalance, stopping every other member while
// it still applied what its producer had sent.
func TestLeaveOnceEveryWorkerDrained(t *testing.T) {
	f := &fleet{mon: newMonitor()}
	leaves := make(chan int, 3)
	for i := range 3 {
		pr, pw := io.Pipe()
		p := &proc{client: i, stdin: pw, done: make(chan struct{})}
		f.add(p)
		go func() {
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				var c command
				if json.Unmarshal(sc.Bytes(), &c) == nil && c.Cmd == cmdLeave {
					leaves <- i
				}
			}
		}()
		t.Cleanup(func() { _ = pw.Close() })
	}
	drained := func(p *proc) {
		p.mu.Lock()
		p.stats = &workerStats{}
		p.mu.Unlock()
		f.mon.event(p.client, event{Ev: evStats})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.letLeave(ctx)

	drained(f.procs[0])
	close(f.procs[1].done) // exited
	f.mon.exited()
	select {
	case i := <-leaves:
		t.Fatalf("worker %d let leave while worker 2 was still draining", i)
	case <-time.After(100 * time.Millisecond):
	}
	drained(f.procs[2])
	got := map[int]bool{}
	for range 3 {
		got[<-leaves] = true
	}
	if len(got) != 3 {
		t.Fatalf("let leave: %v, want every worker", got)
	}

	// The worker's side: a Drainer waits for cmdLeave, another does not.
	w := &worker{leaveCh: make(chan struct{})}
	waited := make(chan struct{})
	go func() { w.leaveWhenLet(drainer{}); close(waited) }()
	select {
	case <-waited:
		t.Fatal("a Drainer went on before cmdLeave")
	case <-time.After(100 * time.Millisecond):
	}
	w.leave()
	<-waited
	w2 := &worker{leaveCh: make(chan struct{})}
	w2.leaveWhenLet(struct{ Client }{}) // returns at once
}

type drainer struct{ Client }

func (drainer) Drain(context.Context) error { return nil }
