package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// liveOp is an operation of client on key from call to ret (Inf: unknown
// outcome), accepted when ok, else failed (refused when refused).
func liveOp(client int, seq int64, key string, call, ret history.Time, outcome history.Outcome, refused bool) history.Op {
	op := history.Op{Client: client, Seq: seq, Key: key, Kind: "w", Call: call, Return: ret, Outcome: outcome}
	if refused {
		op.Meta = map[string]string{MetaRefused: "true"}
	}
	return op
}

// A key waits while a request on it is pending from a worker under no
// fault of its own, between two completions on it; the longest such wait
// is its stall.
func TestKeyStalls(t *testing.T) {
	w := window{from: 0, to: 10000 * ms}
	workers := []int{0, 1, 2}
	for _, tc := range []struct {
		name     string
		ops      []history.Op
		excused  map[int][]span
		unleased bool
		global   []span
		want     map[string]wait // by key; absent: no wait
	}{
		{"served at once: a wait of the operation's own length",
			[]history.Op{liveOp(0, 1, "a", 1000*ms, 1010*ms, history.OK, false)}, nil, false, nil,
			map[string]wait{"a": {key: "a", from: 0, to: 1010 * ms, waited: 10 * ms}}},
		{"a request pending behind a stopped holder waits until another's completes",
			[]history.Op{
				liveOp(0, 1, "a", 1000*ms, history.Inf, history.Unknown, false), // the holder, stopped
				liveOp(1, 1, "a", 1100*ms, 3100*ms, history.Fail, false),        // timed out
				liveOp(1, 2, "a", 3100*ms, 4000*ms, history.OK, false),          // took over
			}, map[int][]span{0: {{1000 * ms, 9000 * ms}}}, false, nil,
			map[string]wait{"a": {key: "a", from: 0, to: 4000 * ms, waited: 2900 * ms}}},
		{"with no lease, a fault holding a request on the key excuses every wait on it",
			[]history.Op{
				liveOp(0, 1, "a", 1000*ms, 3500*ms, history.OK, false), // held by its fault until 3.4s
				liveOp(1, 1, "a", 1100*ms, 3100*ms, history.Fail, false),
				liveOp(1, 2, "a", 3100*ms, 4000*ms, history.OK, false),
			}, map[int][]span{0: {{1000 * ms, 3400 * ms}}}, true, nil,
			map[string]wait{"a": {key: "a", from: 3500 * ms, to: 4000 * ms, waited: 500 * ms}}}, // not 2.4s before the first completion
		{"a refusal serves the key; a failure does not",
			[]history.Op{
				liveOp(1, 1, "a", 1000*ms, 2500*ms, history.Fail, false),
				liveOp(2, 1, "a", 1000*ms, 1500*ms, history.Fail, true),
			}, nil, false, nil,
			map[string]wait{"a": {key: "a", from: 1500 * ms, to: w.to, waited: 1000 * ms}}},
		{"a worker's own fault excuses its own wait, not another's",
			[]history.Op{
				liveOp(0, 1, "a", 1000*ms, 5000*ms, history.OK, false),
				liveOp(1, 1, "b", 1000*ms, 5000*ms, history.OK, false),
			}, map[int][]span{0: {{1000 * ms, 4900 * ms}}}, false, nil,
			map[string]wait{"a": {key: "a", from: 0, to: 5000 * ms, waited: 100 * ms}, "b": {key: "b", from: 0, to: 5000 * ms, waited: 4000 * ms}}},
		{"a fault of the whole run excuses every wait",
			[]history.Op{liveOp(1, 1, "a", 1000*ms, 5000*ms, history.OK, false)}, nil, false, []span{{2000 * ms, 4500 * ms}},
			map[string]wait{"a": {key: "a", from: 0, to: 5000 * ms, waited: 1500 * ms}}},
		{"an unknown outcome waits until its client's next call",
			[]history.Op{
				liveOp(1, 1, "a", 1000*ms, history.Inf, history.Unknown, false),
				liveOp(1, 2, "b", 3000*ms, 3001*ms, history.OK, false),
			}, nil, false, nil,
			map[string]wait{"a": {key: "a", from: 0, to: w.to, waited: 2000 * ms}, "b": {key: "b", from: 0, to: 3001 * ms, waited: 1 * ms}}},
		{"retries of one wait add up across their gaps",
			[]history.Op{
				liveOp(1, 1, "a", 1000*ms, 2000*ms, history.Fail, false),
				liveOp(1, 2, "a", 2010*ms, 3000*ms, history.Fail, false),
				liveOp(1, 3, "a", 3010*ms, 4000*ms, history.OK, false),
			}, nil, false, nil,
			map[string]wait{"a": {key: "a", from: 0, to: 4000 * ms, waited: 2980 * ms}}},
		{"clipped to the window; a check's reads (no worker) are left out",
			[]history.Op{
				liveOp(1, 1, "a", -500*ms, 500*ms, history.OK, false),
				liveOp(1, 2, "a", 9000*ms, 11000*ms, history.OK, false),
				liveOp(9, 1, "c", 1000*ms, 9000*ms, history.Fail, false),
			}, nil, false, nil,
			map[string]wait{"a": {key: "a", from: 500 * ms, to: w.to, waited: 1000 * ms}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]wait{}
			for _, s := range keyStalls(tc.ops, w, workers, exclusions{byClient: tc.excused, global: tc.global, unleased: tc.unleased}) {
				got[s.key] = s
			}
			if len(got) != len(tc.want) {
				t.Errorf("stalls %v, want %v", got, tc.want)
			}
			for k, want := range tc.want {
				if got[k] != want {
					t.Errorf("key %s: %+v, want %+v", k, got[k], want)
				}
			}
		})
	}
}

// The whole run waits while some worker runs under no fault of its own
// and no key is served: an orphaned key that no client asks for (each asks
// only for its own) shows there, and a fleet all stopped does not wait.
func TestRunStall(t *testing.T) {
	w := window{from: 0, to: 10000 * ms}
	ops := []history.Op{
		liveOp(0, 1, "a", 900*ms, 1000*ms, history.OK, false),
		liveOp(1, 1, "a", 7900*ms, 8000*ms, history.OK, false),
	}
	for _, tc := range []struct {
		name    string
		excused map[int][]span
		want    history.Time
	}{
		{"nobody excused: the whole gap", nil, 7000 * ms},
		{"one stopped, the other running: the whole gap", map[int][]span{0: {{1000 * ms, 9000 * ms}}}, 7000 * ms},
		{"both stopped for a part: the rest", map[int][]span{0: {{1000 * ms, 9000 * ms}}, 1: {{1500 * ms, 6000 * ms}}}, 2500 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := runStall(ops, w, []int{0, 1}, exclusions{byClient: tc.excused})
			if !ok || s.key != allKeys || s.waited != tc.want || s.from != 1000*ms || s.to != 7900*ms+100*ms {
				t.Errorf("%+v (%v), want %v waited between 1s and 8s", s, ok, tc.want)
			}
		})
	}
}

// With no lease, the run does not wait while a fault holds a request: the
// stopped transaction's locks hold up the others until the fault ends.
func TestRunStallUnleased(t *testing.T) {
	w := window{from: 0, to: 10000 * ms}
	ops := []history.Op{
		liveOp(0, 1, "a", 900*ms, 1000*ms, history.OK, false),
		liveOp(0, 2, "b", 1000*ms, 8500*ms, history.OK, false), // held by its fault, 1 s to 9 s
		liveOp(1, 1, "a", 1100*ms, 8000*ms, history.OK, false), // waits on b's locks
	}
	excused := map[int][]span{0: {{1000 * ms, 9000 * ms}}}
	for _, tc := range []struct {
		unleased bool
		want     history.Time
	}{
		{false, 7000 * ms}, // 1 s to 8 s: worker 1 ran under no fault
		{true, 1500 * ms},  // only 8.5 s to the window's end
	} {
		s, ok := runStall(ops, w, []int{0, 1}, exclusions{byClient: excused, unleased: tc.unleased})
		if !ok || s.waited != tc.want {
			t.Errorf("unleased %v: %+v (%v), want %v waited", tc.unleased, s, ok, tc.want)
		}
	}
}

// The bound is the approach's lease, an operation's time, then a second
// for the next; a stall over it is a violation that names its key and
// length, one at it is not.
func TestStallBound(t *testing.T) {
	prot := Protection{Lease: time.Second, What: "the member lease"}
	bound := stallBound(prot, Params{OpTimeout: 3 * time.Second})
	if bound != 5*time.Second {
		t.Fatalf("bound %v, want 5s", bound)
	}
	stalls := []wait{
		{key: "at", from: 0, to: 6000 * ms, waited: 5000 * ms},
		{key: "over", from: 1000 * ms, to: 8000 * ms, waited: 5001 * ms},
		{key: allKeys, from: 1000 * ms, to: 8000 * ms, waited: 7000 * ms},
	}
	vs := stallViolations(stalls, bound, prot, 0)
	if len(vs) != 2 {
		t.Fatalf("%d violations, want 2: %v", len(vs), vs)
	}
	for i, want := range []string{"key over waited 5.001s to be served, between 1.00s and 8.00s, over the bound of 5s", "the run (no key served) waited 7s"} {
		if vs[i].Anomaly != history.Stall || !strings.Contains(vs[i].Text, want) {
			t.Errorf("violation %d: %s %q, want a stall saying %q", i, vs[i].Anomaly, vs[i].Text, want)
		}
	}
}

// A worker held at a point is excused from the point to its resume; one
// held at a late gate, to its next membership lease; one never resumed,
// to the window's end.
func TestHolds(t *testing.T) {
	w := window{from: 0, to: 10000 * ms}
	points := []pointSeen{
		{client: 1, ev: event{Ev: evResumed, T: 3000 * ms}},
		{client: 1, ev: event{Ev: evPoint, T: 1000 * ms, Mode: modeStop, Key: "a"}},
		{client: 2, ev: event{Ev: evPoint, T: 2000 * ms, Mode: modeLate}},
		{client: 3, ev: event{Ev: evPoint, T: 4000 * ms, Mode: modeHold}},
	}
	owners := map[int][]event{2: {{Ev: evMember, T: 500 * ms}, {Ev: evClaim, T: 2500 * ms}, {Ev: evMember, T: 6000 * ms}, {Ev: evMember, T: 7000 * ms}}}
	got := holds(points, owners, w)
	want := map[int][]span{1: {{1000 * ms, 3000 * ms}}, 2: {{2000 * ms, 6000 * ms}}, 3: {{4000 * ms, w.to}}}
	for c, ss := range want {
		if len(got[c]) != 1 || got[c][0] != ss[0] {
			t.Errorf("worker %d: %v, want %v", c, got[c], ss)
		}
	}
	if len(got) != len(want) {
		t.Errorf("holds %v, want %v", got, want)
	}
}

// The span helpers: union merges, subtract cuts, intersect keeps what both
// cover.
func TestSpans(t *testing.T) {
	a := union([]span{{5, 8}, {1, 3}, {2, 4}, {9, 9}}, nil)
	if want := []span{{1, 4}, {5, 8}}; !equalSpans(a, want) {
		t.Errorf("union %v, want %v", a, want)
	}
	if got, want := subtract([]span{{0, 10}}, a), []span{{0, 1}, {4, 5}, {8, 10}}; !equalSpans(got, want) {
		t.Errorf("subtract %v, want %v", got, want)
	}
	if got, want := intersect(a, []span{{3, 6}}), []span{{3, 4}, {5, 6}}; !equalSpans(got, want) {
		t.Errorf("intersect %v, want %v", got, want)
	}
}

func equalSpans(a, b []span) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
