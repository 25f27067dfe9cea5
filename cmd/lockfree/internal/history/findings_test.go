package history

import "testing"

// Add puts a violation under its key, making the key's report when the key
// had none, and marks it violated.
func TestReportAdd(t *testing.T) {
	r := Findings{Keys: []KeyFindings{{Key: "a", Status: Passed}}}
	r.Add(Violation{Key: "a", Anomaly: "x"})
	r.Add(Violation{Key: "b", Anomaly: "y"})
	r.Add(Violation{Key: "b", Anomaly: "z"})
	if len(r.Keys) != 2 || r.Keys[0].Status != Violated || len(r.Keys[0].Violations) != 1 ||
		r.Keys[1].Key != "b" || r.Keys[1].Status != Violated || len(r.Keys[1].Violations) != 2 || r.Violations() != 3 {
		t.Errorf("%+v", r.Keys)
	}
}
