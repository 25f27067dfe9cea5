package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// cmdStep lets the operation held at its before-write point write and parks
// the client's next operation at its start, in one step of the worker: the
// client cannot begin another operation (take a lease, raise a fence)
// between its write and the coordinator's cmdClear, whatever the scheduler
// does. The failover fault relies on it to land the stopped client's write
// next. Its foil: cmdClear lets the next operation begin.
func TestStepParksTheNextOperation(t *testing.T) {
	for _, tc := range []struct {
		cmd    string
		parked bool
	}{{cmdStep, true}, {cmdClear, false}} {
		t.Run(tc.cmd, func(t *testing.T) {
			pr, pw := io.Pipe()
			w := &worker{out: &emitter{w: pw}}
			events := make(chan event)
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

			w.armed = &arm{Mode: modeHold, Key: "k"}
			ops := make(chan string)
			go func() {
				ctx := context.WithValue(context.Background(), opKey{}, &Invocation{key: "k"})
				w.park(ctx, "k") // not armed for it: goes on
				w.point(ctx, "harness.test.before-write")
				ops <- "wrote"
				w.park(ctx, "k")
				ops <- "next began"
			}()
			if ev := <-events; ev.Ev != evPoint || ev.Mode != modeHold {
				t.Fatalf("first event %+v, want the hold at the before-write point", ev)
			}
			if tc.cmd == cmdStep {
				w.step(nil)
			} else {
				w.clear()
			}
			if got := <-ops; got != "wrote" {
				t.Fatalf("%q, want the held write first", got)
			}
			<-events // resumed from the hold
			select {
			case ev := <-events:
				if !tc.parked || ev.Ev != evPoint || ev.Mode != modePark {
					t.Fatalf("after %s: event %+v", tc.cmd, ev)
				}
				// The park's event is written before it blocks, and only
				// clear releases it: the next operation has not begun.
				select {
				case got := <-ops:
					t.Fatalf("%q while parked", got)
				default:
				}
				w.clear()
				<-ops
			case got := <-ops:
				if tc.parked {
					t.Fatalf("%q after %s: the next operation began unparked", got, tc.cmd)
				}
			}
		})
	}
}
