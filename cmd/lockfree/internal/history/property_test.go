package history

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

// gen writes a linearizable history: a sequential run whose operations take
// effect at increasing points, each recorded with an interval around its
// point (so they overlap at random), some of unknown outcome (taking effect
// much later, or never) and some failed (taking no effect).
type gen struct {
	rnd    *rand.Rand
	b      *builder
	point  int64 // the next operation's point
	spread int64 // how far a call or a return may be from its point
	settle int64 // how late an uncertain operation may take effect; 0: any
}

func newGen(seed uint64) *gen {
	rnd := rand.New(rand.NewPCG(seed, seed^0x5eed))
	g := &gen{rnd: rnd, b: newBuilder(), point: 1000, spread: 1 + rnd.Int64N(60)}
	if rnd.IntN(2) == 0 {
		g.settle = 50 + rnd.Int64N(200)
	}
	return g
}

// next returns the next point and an interval around it.
func (g *gen) next() (point, call, ret int64) {
	g.point += 1 + g.rnd.Int64N(10)
	return g.point, g.point - g.rnd.Int64N(g.spread), g.point + g.rnd.Int64N(g.spread)
}

// uncertainCall is the call of an uncertain operation that takes effect at
// point: any time before it, within settle when there is one.
func (g *gen) uncertainCall(point int64) int64 {
	back := 1 + g.spread*10
	if g.settle > 0 {
		back = g.settle
	}
	return point - g.rnd.Int64N(back)
}

func (g *gen) client() int { return g.rnd.IntN(16) }

// documentHistory generates n operations on key, ending with a read that
// lists the edits.
func (g *gen) documentHistory(key string, n int) {
	var edits []string
	state := func() DocState {
		if len(edits) == 0 {
			return DocState{}
		}
		return DocState{Version: int64(len(edits)), Head: edits[len(edits)-1]}
	}
	for i := range n {
		p, call, ret := g.next()
		id := key + "-" + strconv.Itoa(i)
		switch r := g.rnd.IntN(100); {
		case r < 10:
			if g.rnd.IntN(2) == 0 {
				edits = append(edits, id)
				call = g.uncertainCall(p)
			}
			g.b.add(g.client(), key, KindEdit, call, -1, Unknown, edit(id), nil)
		case r < 15:
			g.b.add(g.client(), key, KindEdit, call, ret, Fail, edit(id), nil)
		case r < 30:
			g.b.add(g.client(), key, KindRead, call, ret, OK, nil, state())
		default:
			g.b.add(g.client(), key, KindEdit, call, ret, OK, edit(id), state())
			edits = append(edits, id)
		}
	}
	_, call, ret := g.next()
	final := state()
	final.Edits = append([]string{}, edits...)
	g.b.add(g.client(), key, KindRead, call, ret, OK, nil, final)
}

// Every linearizable history passes, however it is cut into windows.
func TestLinearizableHistoriesPass(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	for seed := range uint64(seeds) {
		g := newGen(seed)
		m := Document{}
		for k := range 1 + g.rnd.IntN(3) {
			g.documentHistory("doc-"+strconv.Itoa(k), 20+g.rnd.IntN(150))
		}
		windows := []int{2, 3, 7, 25, DefaultWindow}
		// The timeout is generous: this checks verdicts, not speed.
		cfg := Config{Window: windows[g.rnd.IntN(len(windows))], Settle: time.Duration(ms(g.settle)), Timeout: 10 * time.Minute}
		t.Run(fmt.Sprintf("seed=%d/%s/window=%d/settle=%v", seed, m.name(), cfg.Window, cfg.Settle), func(t *testing.T) {
			requirePassed(t, check(t, m, g.b.ops, cfg))
		})
	}
}

// busyDocument writes a linearizable history of n operations by clients
// working at once on one document, each client's operations one after the
// other: each takes effect at a random point inside its interval, and the
// answers follow the order of the points. One in a hundred is uncertain.
func busyDocument(seed uint64, clients, n int) []Op {
	rnd := rand.New(rand.NewPCG(seed, 1))
	type planned struct {
		client           int
		call, ret, point int64
		kind             string
		outcome          Outcome
	}
	free := make([]int64, clients) // when each client starts its next operation
	var ops []planned
	for i := range n {
		c := i % clients
		call := free[c] + rnd.Int64N(3)
		ret := call + 1 + rnd.Int64N(40)
		p := planned{client: c, call: call, ret: ret, point: call + rnd.Int64N(ret-call+1), kind: KindEdit, outcome: OK}
		switch r := rnd.IntN(100); {
		case r == 0:
			p.outcome = Unknown
		case r < 20:
			p.kind = KindRead
		}
		free[c] = ret + 1
		ops = append(ops, p)
	}
	slices.SortFunc(ops, func(a, b planned) int { return cmp.Compare(a.point, b.point) })
	b := newBuilder()
	var state DocState
	for i, p := range ops {
		id := "e" + strconv.Itoa(i)
		switch {
		case p.kind == KindRead && p.outcome == Unknown:
			b.add(p.client, "doc", KindRead, p.call, -1, Unknown, nil, nil)
		case p.kind == KindRead:
			b.add(p.client, "doc", KindRead, p.call, p.ret, OK, nil, state)
		case p.outcome == Unknown:
			if rnd.IntN(2) == 0 {
				state = DocState{Version: state.Version + 1, Head: id}
			}
			b.add(p.client, "doc", KindEdit, p.call, -1, Unknown, edit(id), nil)
		default:
			b.add(p.client, "doc", KindEdit, p.call, p.ret, OK, edit(id), state)
			state = DocState{Version: state.Version + 1, Head: id}
		}
	}
	return b.ops
}

// A 16-client, one-key, 10 000-operation history passes, cut into windows.
// The timeout is generous: this checks the verdict, not the speed
// (BenchmarkDocumentBusyKey measures that).
func TestBusyDocumentPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("10 000 operations")
	}
	ops := busyDocument(1, 16, 10_000)
	rep := check(t, Document{}, ops, Config{Timeout: 10 * time.Minute})
	requirePassed(t, rep)
	if k := rep.Keys[0]; k.Windows != 10 {
		t.Errorf("%d windows, want 10 of %d operations", k.Windows, DefaultWindow)
	}
}

// BenchmarkDocumentBusyKey checks a 16-client, one-key, 10 000-operation
// document history with the default bounds, which must finish every window
// within the default timeout. It reports the operations checked per second.
func BenchmarkDocumentBusyKey(b *testing.B) {
	ops := busyDocument(1, 16, 10_000)
	m := Document{}
	for b.Loop() {
		rep, err := Check(context.Background(), m, ops, Config{})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Keys[0].Status != Passed {
			b.Fatalf("%s: %s %s", rep.Keys[0].Status, rep.Keys[0].Note, describeViolations(rep.Keys[0].Violations))
		}
	}
	b.ReportMetric(float64(len(ops)*b.N)/b.Elapsed().Seconds(), "ops/s")
}
