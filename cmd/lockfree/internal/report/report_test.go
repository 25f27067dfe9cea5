package report

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestResultJSONChecked(t *testing.T) {
	for _, tc := range []struct {
		res  Result
		want string
	}{
		{Result{Approach: Raw, Checked: true, Violations: 0}, `"violations":0`},
		{Result{Approach: Raw, Checked: true, Violations: 3}, `"violations":3`},
		{Result{Approach: Raw}, `"violations":null`},
	} {
		b, err := json.Marshal(tc.res)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), tc.want) || strings.Count(string(b), `"violations"`) != 1 {
			t.Errorf("%+v → %s, want %s once", tc.res, b, tc.want)
		}
		var back Result
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, tc.res) {
			t.Errorf("round trip of %s = %+v, %v", b, back, err)
		}
	}
}

// TestResultJSONOlderFormat reads a line written before "checked" existed:
// an integer "violations" meant checked.
func TestResultJSONOlderFormat(t *testing.T) {
	var r Result
	if err := json.Unmarshal([]byte(`{"approach":"raw","violations":2}`), &r); err != nil || !r.Checked || r.Violations != 2 {
		t.Errorf("older line = %+v, %v", r, err)
	}
	if err := json.Unmarshal([]byte(`{"approach":"raw","violations":null,"checked":false}`), &r); err != nil || r.Checked || r.Violations != 0 {
		t.Errorf("unchecked line = %+v, %v", r, err)
	}
}

// TestReportJSONKeepsNames pins the public names: added, never renamed.
func TestReportJSONKeepsNames(t *testing.T) {
	reps := Fixture(false)
	b, err := json.Marshal(reps[0])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scenario", "backend", "clients", "keys", "duration_s", "faults", "results", "fault_how"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	r := m["results"].([]any)[2].(map[string]any)
	for _, k := range []string{"approach", "label", "ops", "ops_per_sec", "p50_ms", "p99_ms", "retries", "rejected", "violations",
		"checked", "errors", "uncertain", "pauses", "round_trips_per_op", "statements_per_op", "faults_injected", "timeline"} {
		if _, ok := r[k]; !ok {
			t.Errorf("result lacks %q", k)
		}
	}
	if fi := r["faults_injected"].(map[string]any); fi["pause"] != float64(4) {
		t.Errorf("faults_injected = %v", fi)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, reps[0]) {
		t.Errorf("the report does not survive JSON: %v", err)
	}
	if skipped := m["results"].([]any)[4].(map[string]any); skipped["skipped"] == nil {
		t.Errorf("skipped result = %v", skipped)
	}
}

func TestParseInts(t *testing.T) {
	got, err := ParseInts("1, 4,16,10_000", 1, 10000)
	if err != nil || !reflect.DeepEqual(got, []int{1, 4, 16, 10000}) {
		t.Errorf("ParseInts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "1,,2", "x", "4,4", "10001", strings.Repeat("9", 300)} {
		if _, err := ParseInts(bad, 1, 10000); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseInts(%.20q) = %v, want ErrInvalid", bad, err)
		} else if len(err.Error()) > 200 {
			t.Errorf("error is %d bytes long: %.80s…", len(err.Error()), err)
		}
	}
}

func TestSweeps(t *testing.T) {
	reps := Fixture(true)
	sweeps := Sweeps(reps)
	if len(sweeps) != 1 {
		t.Fatalf("%d sweeps, want 1 (accounts: the others have one point)", len(sweeps))
	}
	s := sweeps[0]
	if !reflect.DeepEqual(s.Clients, []int{1, 4, 16, 64}) || !reflect.DeepEqual(s.Keys, []int{1, 100, 10000}) {
		t.Errorf("axes = %v × %v", s.Clients, s.Keys)
	}
	p, ok := s.At(16, 100)
	if !ok || p.By[FencedLock].OpsPerSec <= 0 || p.By[FencedLock].Violations == nil {
		t.Errorf("point 16×100 = %+v, %v", p, ok)
	}
	if _, ok := s.At(3, 3); ok {
		t.Error("a point that was not run was found")
	}
	if got := Sweeps(reps[:1]); got != nil {
		t.Errorf("one point is no sweep: %v", got)
	}
}

func TestMergeRounds(t *testing.T) {
	round := func(alt, fenced float64, viol int64, checked bool) []Report {
		base := Report{Scenario: "inventory", Backend: "memory", Clients: 4, Keys: 1, Notes: []string{"same note"}}
		a, f := base, base
		a.Results = []Result{{Approach: Alternative, OpsPerSec: alt, Ops: 10, Checked: true, Pauses: 1}}
		f.Results = []Result{{Approach: FencedLock, OpsPerSec: fenced, Ops: 5, Checked: checked, Violations: viol, Pauses: 2}}
		return []Report{a, f}
	}
	rep := MergeRounds([][]Report{round(400, 100, 0, true), round(300, 100, 1, true), round(500, 200, 0, false)})
	if len(rep.Results) != 2 || rep.Results[0].Approach != Alternative || len(rep.Notes) != 1 {
		t.Fatalf("merged = %+v", rep)
	}
	alt, fenced := rep.Results[0], rep.Results[1]
	if alt.OpsPerSec != 400 || alt.Ops != 30 || alt.Pauses != 3 || !alt.Checked || !reflect.DeepEqual(alt.RoundsOpsPerSec, []float64{400, 300, 500}) {
		t.Errorf("alternative = %+v", alt)
	}
	if fenced.Violations != 1 || fenced.Checked {
		t.Errorf("fenced: violations %d checked %v; want the total and unchecked when a round was", fenced.Violations, fenced.Checked)
	}
	r, ok := rep.Ratio(Alternative, FencedLock)
	if !ok || r.Median != 3 || r.Min != 2.5 || r.Max != 4 || r.Tie() || rep.Rounds.N != 3 {
		t.Errorf("ratio = %+v, %v", r, ok)
	}
	if _, ok := rep.Ratio(Alternative, Raw); ok {
		t.Error("a ratio to raw without raw")
	}
	tie := MergeRounds([][]Report{round(90, 100, 0, true), round(110, 100, 0, true)})
	if r, _ := tie.Ratio(Alternative, FencedLock); !r.Tie() {
		t.Errorf("0.9–1.1 is not a tie: %+v", r)
	}
}

func TestMedian(t *testing.T) {
	xs := []float64{5, 1, 3, 2}
	if Median(xs) != 2.5 || Median(xs[:3]) != 3 || Median(nil) != 0 || xs[0] != 5 {
		t.Errorf("Median wrong or modified its input: %v", xs)
	}
}

func TestCap(t *testing.T) {
	tl := Timeline{End: 10}
	for i := 0; i < 40; i++ {
		l := Lane{Name: "w"}
		for j := 0; j < 100; j++ {
			l.Marks = append(l.Marks, Mark{Kind: MarkWrite, At: float64(j) / 10, ID: string(rune('a'+i%26)) + string(rune('0'+j%10))})
		}
		if i == 33 {
			l.Marks = append(l.Marks, Mark{Kind: MarkViolation, At: 5, Ref: "h7"}, Mark{Kind: MarkRejected, At: 6})
			l.Spans = []Span{{Kind: SpanPause, Start: 4, End: 5}}
		}
		tl.Lanes = append(tl.Lanes, l)
	}
	got := Cap(tl, 10, 200)
	if len(got.Lanes) != 10 || got.Note == "" {
		t.Fatalf("%d lanes, note %q", len(got.Lanes), got.Note)
	}
	kinds := map[MarkKind]int{}
	total, refKept := 0, false
	for _, l := range got.Lanes {
		for _, m := range l.Marks {
			kinds[m.Kind]++
			total++
			refKept = refKept || m.ID == "h7"
		}
	}
	if kinds[MarkViolation] != 1 || kinds[MarkRejected] != 1 || total > 220 || total < 100 {
		t.Errorf("kept %v (%d marks)", kinds, total)
	}
	if !refKept {
		t.Error("the write a violation refers to was dropped")
	}
	small := Timeline{End: 1, Lanes: []Lane{{Name: "a", Marks: []Mark{{Kind: MarkWrite}}}}}
	if c := Cap(small, 10, 200); !reflect.DeepEqual(c, small) {
		t.Errorf("a small timeline changed: %+v", c)
	}
}

// TestFocus zooms on the first stale write: the window holds the pause
// before it, the write it overwrote, and the stale write itself.
func TestFocus(t *testing.T) {
	naive := *Fixture(false)[0].Results[2].Timeline
	from, to, what, ok := Focus(naive)
	if !ok || !strings.Contains(what, "stale write") || to-from > 1.5 {
		t.Fatalf("Focus = %v–%v %q %v", from, to, what, ok)
	}
	w := Window(naive, from, to)
	kinds := map[string]int{}
	for _, l := range w.Lanes {
		for _, m := range l.Marks {
			if m.At < from || m.At > to {
				t.Errorf("mark at %v outside %v–%v", m.At, from, to)
			}
			kinds[string(m.Kind)]++
			if m.Kind == MarkViolation {
				if _, ok := markByID(w, m.Ref); !ok {
					t.Errorf("the write %s that the violation overwrote is outside the window", m.Ref)
				}
			}
		}
		for _, s := range l.Spans {
			if s.Kind == SpanPause {
				kinds["pause"]++
			}
		}
	}
	if kinds["violation"] < 1 || kinds["pause"] < 1 {
		t.Errorf("window shows %v", kinds)
	}
	fenced := *Fixture(false)[0].Results[1].Timeline
	if _, _, what, ok := Focus(fenced); !ok || !strings.Contains(what, "rejected") {
		t.Errorf("fenced focus = %q %v", what, ok)
	}
	if _, _, _, ok := Focus(Timeline{End: 1, Lanes: []Lane{{Marks: []Mark{{Kind: MarkWrite}}}}}); ok {
		t.Error("a timeline with nothing to explain got a focus")
	}
}
