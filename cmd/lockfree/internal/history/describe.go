package history

import (
	"fmt"

	"github.com/lockfree-go/lockfree/internal/short"
)

// describer words the evidence: times in seconds since the history's
// first call, keys and values through short.Quote.
type describer struct{ base Time }

// at is a time as "t=1.820s".
func (d *describer) at(t Time) string {
	if t == Inf {
		return "t=∞"
	}
	return fmt.Sprintf("t=%.3fs", float64(t-d.base)/1e9)
}

// did is "client 3's <what> at t=1.820s": the time an operation completed
// (its effect was acknowledged by then), or, for one of unknown outcome,
// the time it was invoked.
func (d *describer) did(op *Op, what string) string {
	if op.Outcome == Unknown {
		return fmt.Sprintf("client %d's %s (invoked at %s, outcome unknown)", op.Client, what, d.at(op.Call))
	}
	return fmt.Sprintf("client %d's %s at %s", op.Client, what, d.at(op.Return))
}

func quote(s string) string { return short.Quote(s) }

// plural is "1 sale", "2 sales".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Times is "once", "twice", "3 times".
func Times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}

// describeMeta describes an operation's metadata on porcupine's page: who
// ran it, and what became of it.
func describeMeta(m any) string {
	if op, ok := m.(*Op); ok {
		return fmt.Sprintf("client %d, operation %s, %s", op.Client, op.ID(), op.Outcome)
	}
	return ""
}
