package report

import (
	"strings"
	"testing"
)

func inventoryReport() Report {
	return Report{Scenario: "inventory", Backend: "postgres", Clients: 16, Keys: 1, DurationS: 5, Faults: []Fault{"pause"},
		FaultHow: map[Fault]string{"pause": "SIGSTOPs past the lease, each resumed after another worker took over"},
		Results: []Result{
			{Approach: Alternative, OpsPerSec: 4100, Checked: true, FaultsInjected: map[Fault]int64{"pause": 14}},
			{Approach: FencedLock, OpsPerSec: 1000, Checked: true, Rejected: 9, FaultsInjected: map[Fault]int64{"pause": 14}},
			{Approach: NaiveLock, OpsPerSec: 1100, Checked: true, Violations: 37, FaultsInjected: map[Fault]int64{"pause": 12}},
			{Approach: Raw, OpsPerSec: 4200, Checked: true, FaultsInjected: map[Fault]int64{"pause": 14}},
		}}
}

// verdictCases are reports and what their verdict must (and must not) say.
var verdictCases = []struct {
	name string
	rep  func() Report
	want []string
	not  []string
}{
	{"the brief's example", inventoryReport, []string{
		"inventory: naive-lock showed 37 anomalies (stock oversold, an update lost or made up, or an order no sequential store allows); alternative, fenced-lock and raw showed none.",
		"alternative did 4.1× the fenced lock's throughput, and did 0.98× raw SQL's throughput.",
		"Injected: pause 12–14 times per approach (SIGSTOPs past the lease, each resumed after another worker took over).",
	}, []string{"tied", "noise"}},
	{"one violation is singular", func() Report {
		r := inventoryReport()
		r.Results[2].Violations = 1
		return r
	}, []string{"naive-lock showed 1 anomaly (stock oversold"}, nil},
	{"unchecked is not clean", func() Report {
		r := inventoryReport()
		r.Results[3].Checked = false
		return r
	}, []string{"alternative and fenced-lock showed none; raw not checked (—)."}, []string{"raw showed none"}},
	{"a skipped approach says why", func() Report {
		r := inventoryReport()
		r.Results = append(r.Results, Result{Approach: RedisLock, Skipped: "no Redis"})
		return r
	}, []string{"redis-lock skipped: no Redis"}, nil},
	{"a close ratio from one round may be noise", func() Report {
		r := inventoryReport()
		r.Results[0].OpsPerSec = 1050
		return r
	}, []string{"1.1× the fenced lock's", "one round, so this may be noise"}, []string{"tied"}},
	{"a ratio within the rounds' spread is a tie", func() Report {
		r := inventoryReport()
		r.Rounds = &Rounds{N: 3, Ratios: []Ratio{{Of: Alternative, To: FencedLock, Median: 1.04, Min: 0.93, Max: 1.12, PerRound: []float64{0.93, 1.04, 1.12}}}}
		return r
	}, []string{"alternative tied with the fenced lock on throughput at 1.0× (median of 3 rounds, spread 0.93–1.1×)"}, []string{"did 1.0×"}},
	{"a ratio outside the spread is not a tie", func() Report {
		r := inventoryReport()
		r.Rounds = &Rounds{N: 3, Ratios: []Ratio{{Of: Alternative, To: FencedLock, Median: 3.9, Min: 3.5, Max: 4.4, PerRound: []float64{3.5, 3.9, 4.4}}}}
		return r
	}, []string{"alternative did 3.9× the fenced lock's throughput (median of 3 rounds, spread 3.5–4.4×)"}, []string{"tied"}},
	{"no faults: cost, not safety", func() Report {
		r := inventoryReport()
		r.Faults = nil
		for i := range r.Results {
			r.Results[i].FaultsInjected = nil
		}
		return r
	}, []string{"No faults injected: this run measures cost, not safety."}, nil},
	{"a fault that never hit proves nothing", func() Report {
		r := inventoryReport()
		for i := range r.Results {
			r.Results[i].FaultsInjected = nil
		}
		return r
	}, []string{"pause configured, but none took effect"}, nil},
	{"the older harness's pauses count", func() Report {
		r := inventoryReport()
		r.FaultHow = nil
		for i := range r.Results {
			r.Results[i].FaultsInjected, r.Results[i].Pauses = nil, 5
		}
		return r
	}, []string{"Injected: pause 5 times per approach."}, nil},
	{"every fault taken over says so", func() Report {
		r := inventoryReport()
		for i := range r.Results {
			r.Results[i].TakenOver = map[Fault]int64{"pause": r.Results[i].FaultsInjected["pause"]}
		}
		return r
	}, []string{"(SIGSTOPs past the lease, each resumed after another worker took over; every one taken over)."}, []string{"of 14"}},
	{"a fault not taken over says whose", func() Report {
		r := inventoryReport()
		for i := range r.Results {
			r.Results[i].TakenOver = map[Fault]int64{"pause": r.Results[i].FaultsInjected["pause"]}
		}
		r.Results[0].TakenOver["pause"] = 0
		return r
	}, []string{"; taken over: alternative 0 of 14, fenced-lock 14 of 14, naive-lock 12 of 12, raw 14 of 14)."}, []string{"every one"}},
	{"an unknown scenario gets generic words", func() Report {
		r := inventoryReport()
		r.Scenario = "ledger"
		return r
	}, []string{"ledger: naive-lock had 37 violations; alternative, fenced-lock and raw had none."}, nil},
}

func TestVerdictSays(t *testing.T) {
	for _, tc := range verdictCases {
		t.Run(tc.name, func(t *testing.T) {
			got := Judge(tc.rep()).String()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("verdict lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("verdict has %q:\n%s", n, got)
				}
			}
		})
	}
}

func TestVerdictFields(t *testing.T) {
	v := Judge(inventoryReport())
	if len(v.Losses) != 1 || v.Losses[0].Approach != NaiveLock || v.Losses[0].Violations != 37 {
		t.Errorf("losses = %+v", v.Losses)
	}
	if v.VsFenced == nil || v.VsFenced.Ratio != 4.1 || v.VsFenced.Tie || v.VsRaw == nil {
		t.Errorf("vs fenced = %+v, vs raw = %+v", v.VsFenced, v.VsRaw)
	}
	rep := inventoryReport()
	rep.Results = rep.Results[2:] // no alternative: no ratio
	if v := Judge(rep); v.VsFenced != nil || v.VsRaw != nil || strings.Contains(v.String(), "throughput") {
		t.Errorf("ratios without an alternative: %+v %+v %q", v.VsFenced, v.VsRaw, v.String())
	}
}

func TestClosing(t *testing.T) {
	lost := Closing([]Report{inventoryReport()})
	clean := inventoryReport()
	clean.Results[2].Violations = 0
	if !strings.Contains(lost, "what the locks without a fence got wrong above") || strings.Contains(Closing([]Report{clean}), "wrong above") {
		t.Errorf("closing paragraph does not follow the results:\n%s", lost)
	}
	if n := strings.Count(lost, ". "); n < 1 || n > 3 {
		t.Errorf("closing paragraph has %d sentences, want two or three:\n%s", n+1, lost)
	}
}
