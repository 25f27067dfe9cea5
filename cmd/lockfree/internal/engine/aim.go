package engine

import (
	"context"
	"sync/atomic"
)

// The aim of the faults an Aimer aims (capability.go): every other
// injection at the approach's aim point, where one request decides an
// outcome a fault seldom meets at random.

// aimAt returns the point where this injection of f is aimed: on an Aimer
// that aims f, every other injection (n counts them, the first among them)
// is aimed at its AimPoint; "" for one that is not. An aimed injection
// whose worker did not reach the point (missedAim) leaves the aim to the
// next one: a relay with nothing to publish never gets there.
func aimAt(r *run, f Fault, n *atomic.Int64) string {
	a, ok := r.def.(Aimer)
	if !ok || a.AimPoint(f) == "" || n.Add(1)%2 == 0 {
		return ""
	}
	return a.AimPoint(f)
}

// missedAim gives the aim of an injection whose worker did not reach its
// aim point to the next injection (aimAt).
func missedAim(n *atomic.Int64) { n.Add(1) }

// armAimed arms v for this injection of f (n counts them, aimAt): at its
// aim point, in mode, when aimed there; otherwise, or when v did not reach
// the aim point in time, with a.
func (r *run) armAimed(ctx context.Context, f Fault, v *proc, n *atomic.Int64, mode string, a arm) (event, bool) {
	if point := aimAt(r, f, n); point != "" {
		if at, ok := r.armPoint(ctx, f, v, arm{Mode: mode, Point: point}); ok {
			return at, true
		}
		missedAim(n)
	}
	return r.armPoint(ctx, f, v, a)
}

// where names where a fault hit at: the key of its operation, or, at an aim
// point outside any operation (a relay's), the point.
func (at event) where() string {
	if at.Key == "" {
		return "at " + at.Name
	}
	return "on " + at.Key
}
