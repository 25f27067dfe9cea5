package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// cmdClear drops a direction not yet taken (each scenario's own test shows
// that its client takes a direction: TestDirectedOperation).
func TestDirectionCleared(t *testing.T) {
	env := DetachedEnv(Params{Sizes: Sizes{Keys: 50, Clients: 8}}, 1, io.Discard, "account-49")
	env.w.clear()
	if d := env.Directed(); d != "" {
		t.Fatalf("direction %q after cmdClear", d)
	}
	env = DetachedEnv(Params{Sizes: Sizes{Keys: 50, Clients: 8}}, 1, io.Discard, "account-49")
	if d := env.Directed(); d != "account-49" {
		t.Fatalf("direction %q, want account-49", d)
	}
	if d := env.Directed(); d != "" {
		t.Fatalf("direction %q taken twice", d)
	}
}

// A takeover the run's end cut short is not "kept out": the worker that
// came for the key had not had its bound to take it over. Its foil: the
// same worker, the bound not cut short, is kept out (the key stays the
// stopped worker's for takeoverBound; a zero lease keeps it short).
func TestTakeoverCutShort(t *testing.T) {
	for _, cut := range []bool{true, false} {
		t.Run(fmt.Sprintf("cut=%v", cut), func(t *testing.T) {
			mon := newMonitor()
			r := &run{mon: mon, fleet: &fleet{mon: mon}, log: newRunLog(), params: Params{OpTimeout: time.Second}}
			v := &proc{client: 0}
			at := event{Key: "k", T: history.Now(), Op: "0/1"}
			// Client 1 begins an operation on the key and never ends it.
			r.mon.history([]byte(fmt.Sprintf(`{"ev":"invoke","client":1,"seq":1,"key":"k","t":%d}`, history.Now()+1)))
			ctx, cancel := context.WithCancel(context.Background())
			if cut {
				cancel()
			}
			defer cancel()
			want := map[bool]taking{true: noTaker, false: keptOut}[cut]
			if got := r.takeover(ctx, v, at, false); got != want {
				t.Fatalf("takeover: %v, want %v", got, want)
			}
		})
	}
}

// An arm does not fire at a key it skips (a StaleBlind scenario's, under a
// fault a stale write lands under), and fires at the next other one.
func TestArmSkipsBlindKeys(t *testing.T) {
	var out bytes.Buffer
	w := &worker{out: &emitter{w: &out}}
	w.armed = &arm{Mode: modeStall, Skip: []string{"bid-"}}
	for _, key := range []string{"bid-0", "sku-0"} {
		ctx := context.WithValue(context.Background(), opKey{}, &Invocation{key: key})
		w.point(ctx, "harness.test.before-write")
	}
	fired := strings.Count(out.String(), `"ev":"point"`)
	if fired != 1 || !strings.Contains(out.String(), `"key":"sku-0"`) || strings.Contains(out.String(), `"key":"bid-0"`) {
		t.Fatalf("%d points fired, want one, at sku-0:\n%s", fired, out.String())
	}
}
