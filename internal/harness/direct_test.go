package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/history"
)

// directedEnv is a client's Env in a worker that the coordinator sent to
// key (cmdDirect).
func directedEnv(key string) *Env {
	w := &worker{out: &emitter{w: io.Discard}}
	w.directed = key
	return &Env{Params: Params{Sizes: Sizes{Keys: 50, Clients: 8}}, Rand: rand.New(rand.NewPCG(1, 2)), rec: history.NewRecorder(&bytes.Buffer{}), w: w}
}

// A taker sent to a key makes its next operation on it, once, in every
// scenario whose clients pick their keys; a key of another scenario's kind
// is ignored, and cmdClear drops a direction not yet taken.
func TestDirectedOperation(t *testing.T) {
	t.Run("payments", func(t *testing.T) {
		env := directedEnv("pay-123-7")
		var keys paymentKeys
		_, op, amount, err := keys.next(context.Background(), env)
		if err != nil || op.key != "pay-123-7" || amount != 107 {
			t.Fatalf("first charge: key %q, amount %d, %v; want pay-123-7, 107 (its own amount)", op.key, amount, err)
		}
		if _, op, _, _ := keys.next(context.Background(), env); op.key == "pay-123-7" {
			t.Fatal("the direction was taken twice")
		}
	})
	t.Run("documents", func(t *testing.T) {
		env := directedEnv("doc-42")
		n := 0
		if _, op, _, _, err := docEdit(context.Background(), env, &n); err != nil || op.key != "doc-42" {
			t.Fatalf("edit of %q, %v; want doc-42", op.key, err)
		}
	})
	t.Run("accounts", func(t *testing.T) {
		if k := accountKey(directedEnv("account-49")); k != "account-49" {
			t.Fatalf("append to %q, want account-49", k)
		}
	})
	t.Run("another kind of key", func(t *testing.T) {
		if k := accountKey(directedEnv("doc-1")); !strings.HasPrefix(k, "account-") {
			t.Fatalf("append to %q", k)
		}
	})
	t.Run("cleared", func(t *testing.T) {
		env := directedEnv("account-49")
		env.w.clear()
		if d := env.directed(); d != "" {
			t.Fatalf("direction %q after cmdClear", d)
		}
	})
}

// An inventory taker does the operation of the mix that writes the row it
// was sent to.
func TestInventoryDirected(t *testing.T) {
	for _, tc := range []struct {
		row  string
		i    int
		kind int // the first number of the mix of the operation's kind
	}{
		{"sku-3", 3, 0},
		{"case-3", 3, inventorySales + inventoryBaskets},
		{"price-0", 0, inventorySales + inventoryBaskets + inventoryRestocks},
		{"bid-12", 12, inventorySales + inventoryBaskets + inventoryRestocks + inventoryReprices},
		{"hold-7-2", 7, inventorySales + inventoryBaskets + inventoryRestocks + inventoryReprices + inventoryBids},
	} {
		i, n, ok := inventoryDirected(tc.row)
		if !ok || i != tc.i || n < tc.kind || n >= inventoryMixOf {
			t.Errorf("%s: SKU %d, operation %d, %v; want SKU %d, operation from %d", tc.row, i, n, ok, tc.i, tc.kind)
		}
	}
	for _, row := range []string{"", "doc-1", "sku-", "sku-x", "pay-1-2"} {
		if _, _, ok := inventoryDirected(row); ok {
			t.Errorf("%q: directed", row)
		}
	}
}

// A takeover the run's end cut short is not "kept out": the worker that
// came for the key had not had its bound to take it over. Its foil: the
// same worker, the bound not cut short, is kept out (the key stays the
// stopped worker's for takeoverBound; a zero lease keeps it short).
func TestTakeoverCutShort(t *testing.T) {
	for _, cut := range []bool{true, false} {
		t.Run(fmt.Sprintf("cut=%v", cut), func(t *testing.T) {
			r := &run{mon: newMonitor(), params: Params{OpTimeout: time.Second}}
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
	w.armed = &arm{Mode: modeStall, Skip: inventory{}.BlindKeys()}
	for _, key := range []string{"bid-0", "sku-0"} {
		ctx := context.WithValue(context.Background(), opKey{}, &Op{key: key})
		w.point(ctx, "harness.test.before-write")
	}
	fired := strings.Count(out.String(), `"ev":"point"`)
	if fired != 1 || !strings.Contains(out.String(), `"key":"sku-0"`) || strings.Contains(out.String(), `"key":"bid-0"`) {
		t.Fatalf("%d points fired, want one, at sku-0:\n%s", fired, out.String())
	}
}
