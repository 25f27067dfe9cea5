package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// Stall blocks the goroutine of a worker's operation at its before-write
// point for longer than the lease, the rest of the process running on (its
// keepalives too): a goroutine descheduled at the worst instruction,
// deterministic.
const Stall Fault = "stall"

type stall struct{}

func (stall) Name() Fault { return Stall }
func (stall) How() string {
	return "stalls of one goroutine at a before-write point for twice the lease plus a margin, the process and its renewals running on, a worker sent to the key meanwhile"
}
func (stall) counts() string {
	return "the point fired, whether or not a worker took the key over meanwhile (counted apart)"
}
func (stall) start(r *run) injector { return stallRun{r} }
func (stall) pointArmed()           {}

// span: from half the lease, which it outlasts not, to three times the
// lease and the margin.
func (stall) span(lease time.Duration) (lo, hi time.Duration) {
	return lease / 2, 3*lease + leaseMargin(lease)
}

type stallRun struct{ r *run }

// inject stalls v's operation at its next before-write point for twice the
// lease and a margin.
func (s stallRun) inject(ctx context.Context, v *proc) {
	s.injectFor(ctx, v, 2*s.r.prot.Lease+s.r.margin())
}

// injectFor stalls v's operation at its next before-write point for d.
func (s stallRun) injectFor(ctx context.Context, v *proc, d time.Duration) {
	r := s.r
	at, ok := r.armPoint(ctx, Stall, v, arm{Mode: modeStall, For: d})
	if !ok {
		return
	}
	t := r.takeover(ctx, v, at, true)
	r.finish(ctx, v, at, true, Stall)
	r.countTaking(ctx, Stall, v, at, t, false)
	r.log.span(v.client, report.SpanStall, at.T, at.T+history.Time(d), fmt.Sprintf("stall on %s", at.Key))
}
