package engine

import (
	"context"
	"strings"
)

// Where the faults that stop a worker at a point stop it (Config.At,
// report.Injection.At).
const (
	// AtBeforeWrite: at the operation's before-write point, between its
	// read, claim or lock and its write (a name ending in
	// "before-write").
	AtBeforeWrite = "before-write"
	// AtInTx: at an in-transaction point, between a BEGIN of the
	// approach's own and its COMMIT (a name ending in ".in-tx"), its
	// transaction open meanwhile (Transactor).
	AtInTx = "in-tx"
)

// pointArmed: the fault stops a worker at an operation's point (armPoint),
// where Config.At or a random schedule's draw says.
type pointArmed interface{ pointArmed() }

// PointArmed reports whether f stops a worker at an operation's point,
// before-write or in-transaction as Config.At says.
func PointArmed(f Fault) bool {
	k, _ := faultByName(f)
	_, ok := k.(pointArmed)
	return ok
}

// skipAt says why def does not run under f stopping its workers at at, or
// "".
func skipAt(at string, f Fault, def ApproachDef) string {
	if at != AtInTx || !PointArmed(f) {
		return ""
	}
	_, tx := def.(Transactor)
	_, commits := def.(Committer)
	switch {
	case !tx && commits:
		return "its transactions have no in-transaction point (" + AtInTx + ") yet"
	case !tx:
		return "its operations pass no point inside a transaction of their own (" + AtInTx + ")"
	}
	return ""
}

// howAt is how, the phrase of f's injection (FaultHow), for a run whose
// point-armed faults stop their workers at at.
func howAt(how, at string, f Fault) string {
	if at != AtInTx || !PointArmed(f) {
		return how
	}
	return strings.Replace(how, "at a before-write point", "at an in-transaction point", 1)
}

// pointKind returns the kind of operation point name is: AtBeforeWrite,
// AtInTx, or "" for a point of no operation's (a library's background
// work).
func pointKind(name string) string {
	switch {
	case strings.HasSuffix(name, "before-write"):
		return AtBeforeWrite
	case strings.HasSuffix(name, "."+AtInTx):
		return AtInTx
	}
	return ""
}

// kind is the kind of operation point a fires at (pointKind).
func (a *arm) kind() string {
	if a.At == "" {
		return AtBeforeWrite
	}
	return a.At
}

type atKey struct{}

// withAt returns ctx carrying where a fault injected with it stops its
// worker (a random schedule's draw), which armPoint prefers to Config.At.
func withAt(ctx context.Context, at string) context.Context {
	if at == "" {
		return ctx
	}
	return context.WithValue(ctx, atKey{}, at)
}

// armedAt returns the arm's At for fault f injected with ctx: AtInTx when
// ctx or, without a draw, the run's Config says so for a point-armed
// fault; "" (a before-write point) otherwise.
func (r *run) armedAt(ctx context.Context, f Fault) string {
	if !PointArmed(f) {
		return ""
	}
	at, ok := ctx.Value(atKey{}).(string)
	if !ok {
		at = r.cfg.At
	}
	if at == AtInTx {
		return AtInTx
	}
	return ""
}
