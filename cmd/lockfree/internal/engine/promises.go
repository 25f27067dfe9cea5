package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// MetaBroken marks an operation whose client was given an answer that a
// promise of the code under test rules out (Invocation.Broke).
const MetaBroken = "broken"

// BrokenPromise is the violation of an operation given such an answer.
const BrokenPromise history.Anomaly = "broken promise"

// Broke records that the operation was given an answer a promise of the
// code under test rules out whatever the timing — an operation ID sent
// with another operation answered as if it were that one, a resend of a
// recorded ID that wrote again — with what it asked and what it got. The
// run reports it as a violation, besides those of the scenario's check.
// A probe judges only answers: a request whose answer was lost, or that
// a fault cut off, tells nothing.
func (o *Invocation) Broke(format string, args ...any) {
	if o.call == nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if slices.Contains(o.broken, msg) {
		return // seen again by a retry of the same call
	}
	o.broken = append(o.broken, msg)
	o.Set(MetaBroken, strings.Join(o.broken, "; "))
}

// Broke is Invocation.Broke on the operation ctx belongs to, if any.
func (e *Env) Broke(ctx context.Context, format string, args ...any) { brokeOn(ctx, format, args...) }

// brokeOn is Invocation.Broke on the operation ctx belongs to, if any.
func brokeOn(ctx context.Context, format string, args ...any) {
	if op := opFrom(ctx); op != nil {
		op.Broke(format, args...)
	}
}

// Expect holds an answer to a promise: when err is the store's answer
// (Answered, against errs) and does not match want, the operation of ctx
// was given an answer the promise rules out (Broke). what says what was
// asked.
func (e *Env) Expect(ctx context.Context, err, want error, errs []error, what string) {
	if Answered(err, errs...) && !errors.Is(err, want) {
		e.Broke(ctx, "%s was answered %v, not %v", what, err, want)
	}
}

// checkPromises adds to rep a violation for each operation given an
// answer a promise rules out (MetaBroken).
func checkPromises(rep *history.Findings, ops []history.Op) {
	for _, op := range ops {
		what := op.Meta[MetaBroken]
		if what == "" {
			continue
		}
		rep.Add(history.Violation{Key: op.Key, Anomaly: BrokenPromise, Marks: []history.Mark{{Op: op, Role: history.Culprit}},
			Text: fmt.Sprintf("client %d's %s called at t=%.3fs was given an answer its store's promise rules out: %s",
				op.Client, op.Kind, float64(op.Call-rep.Base)/1e9, strings.TrimSpace(what))})
	}
}

// Answered reports whether err is a store's answer — none, or one of its
// errors (errs) — not a request that a fault cut off or whose answer was
// lost, which tells nothing of a promise.
func Answered(err error, errs ...error) bool {
	return err == nil || slices.ContainsFunc(errs, func(e error) bool { return errors.Is(err, e) })
}

// PurgeAll calls purge, a store's (atomic's or occ's Recorder.Purge),
// until it deletes fewer records than its limit or fails, at most 100
// times: all a store may drop, dropped.
func PurgeAll(ctx context.Context, purge func(ctx context.Context, limit int) (int, error)) {
	const limit = 1000
	for range 100 {
		if n, err := purge(ctx, limit); err != nil || n < limit {
			return
		}
	}
}
