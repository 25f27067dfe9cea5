// Package historytest writes synthetic histories and checks what a
// history check reported about them, for the tests of the checks that live
// outside package history: the scenarios' own.
package historytest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// Ms is a time on a test history's clock, in milliseconds.
func Ms(n int64) history.Time { return history.Time(n * 1e6) }

// Builder writes a synthetic history. The zero value is ready to use.
type Builder struct {
	// Ops are the operations added so far.
	Ops []history.Op
	seq map[int]int64
}

// Add appends an operation of client on key, called at call and returned
// at ret (milliseconds; ret < 0: it never returned, and is Unknown with
// Return Inf), with in and out as its Input and Output when not nil. It
// returns the operation, valid until the next Add.
func (b *Builder) Add(client int, key, kind string, call, ret int64, o history.Outcome, in, out any) *history.Op {
	if b.seq == nil {
		b.seq = map[int]int64{}
	}
	b.seq[client]++
	op := history.Op{Client: client, Seq: b.seq[client], Key: key, Kind: kind, Call: Ms(call), Return: Ms(ret), Outcome: o}
	if o == history.Unknown {
		op.Return = history.Inf
	}
	if in != nil {
		op.Input = JSON(in)
	}
	if out != nil {
		op.Output = JSON(out)
	}
	b.Ops = append(b.Ops, op)
	return &b.Ops[len(b.Ops)-1]
}

// JSON encodes v, which must encode.
func JSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// By is an effect of key, numbered seq, made by op.
func By(key string, seq int64, op *history.Op) history.Effect {
	return history.Effect{Key: key, Seq: seq, By: op.ID()}
}

// Got fails the test on a check's error, and returns its report.
func Got(t *testing.T) func(*history.Findings, error) *history.Findings {
	return func(rep *history.Findings, err error) *history.Findings {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
}

// RequirePassed fails unless every key of rep passed.
func RequirePassed(t *testing.T, rep *history.Findings) {
	t.Helper()
	for _, k := range rep.Keys {
		if k.Status != history.Passed {
			t.Errorf("key %s: %s, want passed; %s", k.Key, k.Status, Describe(k.Violations))
		}
	}
	if rep.Figure() != "0" {
		t.Errorf("Figure() = %q, want 0", rep.Figure())
	}
}

// RequireViolation fails unless rep has a violation of anomaly a whose
// marks include each of roles, and returns it.
func RequireViolation(t *testing.T, rep *history.Findings, a history.Anomaly, roles ...history.Role) history.Violation {
	t.Helper()
	var all []history.Violation
	for _, k := range rep.Keys {
		all = append(all, k.Violations...)
	}
	for _, v := range all {
		if v.Anomaly == a && hasRoles(v, roles) {
			t.Logf("%s: %s", v.Anomaly, v.Text)
			return v
		}
	}
	t.Fatalf("no %s violation with roles %v; got %s", a, roles, Describe(all))
	return history.Violation{}
}

func hasRoles(v history.Violation, roles []history.Role) bool {
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

// RequireAnomalies fails unless key's violations are exactly want, in any
// order.
func RequireAnomalies(t *testing.T, rep *history.Findings, key string, want ...history.Anomaly) {
	t.Helper()
	k := rep.Key(key)
	if k == nil {
		t.Fatalf("no key %s in the report", key)
	}
	count := map[history.Anomaly]int{}
	for _, a := range want {
		count[a]++
	}
	for _, v := range k.Violations {
		count[v.Anomaly]--
	}
	for _, n := range count {
		if n != 0 {
			t.Errorf("key %s: want %v, got %s", key, want, Describe(k.Violations))
			return
		}
	}
	if (len(want) > 0) != (k.Status == history.Violated) {
		t.Errorf("key %s: status %s with %d violations", key, k.Status, len(want))
	}
}

// Marked returns the client of v's mark with role r.
func Marked(t *testing.T, v history.Violation, r history.Role) int {
	t.Helper()
	for _, m := range v.Marks {
		if m.Role == r {
			return m.Op.Client
		}
	}
	t.Fatalf("violation %q has no %s mark", v.Text, r)
	return -1
}

// Describe lists violations, one a line.
func Describe(vs []history.Violation) string {
	if len(vs) == 0 {
		return "no violations"
	}
	var b strings.Builder
	for _, v := range vs {
		b.WriteString("\n\t" + string(v.Anomaly) + ": " + v.Text)
	}
	return b.String()
}
