package history

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// ms is a time on the test histories' clock, in milliseconds.
func ms(n int64) Time { return Time(n * 1e6) }

// builder writes synthetic histories.
type builder struct {
	ops []Op
	seq map[int]int64
}

func newBuilder() *builder { return &builder{seq: map[int]int64{}} }

// add appends an operation; ret < 0 means it never returned (Unknown,
// Return Inf).
func (b *builder) add(client int, key, kind string, call, ret int64, o Outcome, in, out any) *Op {
	b.seq[client]++
	op := Op{Client: client, Seq: b.seq[client], Key: key, Kind: kind, Call: ms(call), Return: ms(ret), Outcome: o}
	if o == Unknown {
		op.Return = Inf
	}
	if in != nil {
		op.Input = mustJSON(in)
	}
	if out != nil {
		op.Output = mustJSON(out)
	}
	b.ops = append(b.ops, op)
	return &b.ops[len(b.ops)-1]
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// check runs Check and fails the test on an error.
func check(t *testing.T, m Model, ops []Op, cfg Config) *Findings {
	t.Helper()
	rep, err := Check(context.Background(), m, ops, cfg)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return rep
}

func requirePassed(t *testing.T, rep *Findings) {
	t.Helper()
	for _, k := range rep.Keys {
		if k.Status != Passed {
			t.Errorf("key %s: %s, want passed; %s", k.Key, k.Status, describeViolations(k.Violations))
		}
	}
	if rep.Figure() != "0" {
		t.Errorf("Figure() = %q, want 0", rep.Figure())
	}
}

// requireViolation fails unless the report has a violation of anomaly a
// whose marks include each of roles, and returns it.
func requireViolation(t *testing.T, rep *Findings, a Anomaly, roles ...Role) Violation {
	t.Helper()
	var all []Violation
	for _, k := range rep.Keys {
		all = append(all, k.Violations...)
	}
	for _, v := range all {
		if v.Anomaly == a && hasRoles(v, roles) {
			t.Logf("%s: %s", v.Anomaly, v.Text)
			return v
		}
	}
	t.Fatalf("no %s violation with roles %v; got %s", a, roles, describeViolations(all))
	return Violation{}
}

func hasRoles(v Violation, roles []Role) bool {
	for _, r := range roles {
		found := false
		for _, m := range v.Marks {
			found = found || m.Role == r
		}
		if !found {
			return false
		}
	}
	return true
}

func describeViolations(vs []Violation) string {
	if len(vs) == 0 {
		return "no violations"
	}
	var b strings.Builder
	for _, v := range vs {
		b.WriteString("\n\t" + string(v.Anomaly) + ": " + v.Text)
	}
	return b.String()
}

// marked returns the client of the mark with role r.
func marked(t *testing.T, v Violation, r Role) int {
	t.Helper()
	for _, m := range v.Marks {
		if m.Role == r {
			return m.Op.Client
		}
	}
	t.Fatalf("violation %q has no %s mark", v.Text, r)
	return -1
}
