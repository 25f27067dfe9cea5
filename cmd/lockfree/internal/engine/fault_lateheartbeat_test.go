package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// The late gate holds every goroutine that reaches a member's heartbeat or
// step while armed — the first and the ones after it, whatever their
// contexts say — reports the first once, and lets them all go on clear; a
// point of the member's foreground work (a before-write point) passes. Its
// foil: unarmed, the heartbeat passes.
func TestLateGateHoldsHeartbeatsAndSteps(t *testing.T) {
	pr, pw := io.Pipe()
	w := &worker{out: &emitter{w: pw}, haltCh: make(chan struct{})}
	w.agents = newAgents(w)
	events := make(chan event, 8)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), prefixEvent)
			var ev event
			if ok && json.Unmarshal([]byte(line), &ev) == nil {
				events <- ev
			}
		}
	}()
	t.Cleanup(func() { _ = pw.Close() })

	passed := make(chan string, 4)
	reach := func(ctx context.Context, name string) {
		go func() { w.point(ctx, name); passed <- name }()
	}
	reach(context.Background(), pointHeartbeat)
	if got := <-passed; got != pointHeartbeat {
		t.Fatalf("%s passed, want the unarmed heartbeat", got)
	}

	if !w.agentCommand(command{Cmd: cmdArm, Arm: &arm{Mode: modeLate}}) {
		t.Fatal("no agent took the late arm")
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel() // a heartbeat's context ends at its deadline: the hold ignores it
	reach(cancelled, pointHeartbeat)
	if ev := <-events; ev.Ev != evPoint || ev.Mode != modeLate || ev.Name != pointHeartbeat {
		t.Fatalf("event %+v, want the late point at the heartbeat", ev)
	}
	reach(cancelled, pointReconcile)
	reach(context.Background(), "harness.test.before-write")
	if got := <-passed; got != "harness.test.before-write" {
		t.Fatalf("%s passed while the gate was armed", got)
	}
	select {
	case got := <-passed:
		t.Fatalf("%s passed while the gate was armed", got)
	case ev := <-events:
		t.Fatalf("a second event %+v: the gate reports its first hold only", ev)
	case <-time.After(50 * time.Millisecond):
	}
	w.clear()
	for range 2 {
		if got := <-passed; got != pointHeartbeat && got != pointReconcile {
			t.Fatalf("%s passed after clear", got)
		}
	}
}

// An arm that names a point fires there only, never at a before-write
// point.
func TestArmAtAPointSkipsBeforeWrite(t *testing.T) {
	pr, pw := io.Pipe()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	t.Cleanup(func() { _ = pw.Close() })
	w := &worker{out: &emitter{w: pw}, haltCh: make(chan struct{})}
	w.agents = newAgents(w)
	w.armed = &arm{Mode: modeWait, Point: pointBeforeRelease}
	op := context.WithValue(context.Background(), opKey{}, &Invocation{key: "k"})
	w.point(op, "harness.test.before-write") // would block if it fired
	if w.armed == nil {
		t.Fatal("the arm fired at a before-write point")
	}
	done := make(chan struct{})
	go func() { w.point(context.Background(), pointBeforeRelease); close(done) }()
	for {
		w.mu.Lock()
		fired := w.armed == nil
		w.mu.Unlock()
		if fired {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w.clear()
	<-done
}
