package report

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// randomReport is inventoryReport under a random schedule, its naive lock
// with violations.
func randomReport() Report {
	rep := inventoryReport()
	rep.Faults, rep.Seed, rep.DurationS = []Fault{"random"}, 42, 20
	for i := range rep.Results {
		rep.Results[i].Schedule = []Injection{
			{Fault: "pause", AtS: 1.25, Worker: 3, Outcome: &Outcome{Worker: 3, StartS: 1.25, Effect: true}},
			{Fault: "stall", AtS: 1.5, Worker: 0, ForS: 0.4, Outcome: &Outcome{Worker: 5, StartS: 2.1}},
			{Fault: "crash", AtS: 9, Worker: 1},
		}
	}
	return rep
}

// The text, HTML and JSON reports keep each approach's schedule and its
// outcomes, and one with violations says its seed and how to replay it.
func TestScheduleShown(t *testing.T) {
	rep := randomReport()
	var b bytes.Buffer
	WriteTable(&b, rep)
	text := b.String()
	sched := "1.25s pause w3 ✓, 1.50s stall w0 for 0.40s (w5 at 2.10s) ✗, 9.00s crash w1 not played"
	replay := "lockfree compare --scenario inventory --approaches naive-lock --clients 16 --keys 1 --duration 20s --faults random --seed 42"
	for _, want := range []string{"schedule alternative (seed 42): " + sched, "naive-lock: 37 violations under seed 42; replay: " + replay} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if strings.Count(text, "replay:") != 1 {
		t.Errorf("want one replay, for the approach with violations:\n%s", text)
	}
	for i, r := range rep.Results {
		if r.Violations > 0 {
			rep.Results[i].Shrunk = &Shrunk{Keep: []int{0}, Schedule: r.Schedule[:1], Violations: 4, Runs: 2}
		}
	}
	shrunk := "naive-lock: shrunk in 2 runs to 1 of 3 injections, still 4 violations: 1.25s pause w3 ✓; replay: " + replay + " --keep 0"
	b.Reset()
	WriteTable(&b, rep)
	if !strings.Contains(b.String(), shrunk) {
		t.Errorf("text lacks %q:\n%s", shrunk, b.String())
	}
	b.Reset()
	if err := WriteHTML(&b, []Report{rep}, HTMLOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Random schedules", "seed 42", "1.25s pause w3 ✓", replay, "shrunk in 2 runs", "--keep 0"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Seed != 42 || !reflect.DeepEqual(back.Results, rep.Results) {
		t.Errorf("JSON round trip: seed %d, results %v", back.Seed, back.Results)
	}
	if d := Drawn(rep.Results[0].Schedule); d[0].Outcome != nil || rep.Results[0].Schedule[0].Outcome == nil {
		t.Error("Drawn keeps the outcomes, or drops them from its argument")
	}
}
