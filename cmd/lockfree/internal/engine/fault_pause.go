package engine

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// Pause stops a worker with SIGSTOP at its next before-write point — after
// its read, claim or acquire, before its write — and resumes it with
// SIGCONT once the lease that protects the approach has run out and another
// worker, sent to the key, has taken it over or been kept out of it. A
// pause no other worker came for is not counted. On an Aimer, every other
// pause is at its aim point (a relay's, between its read and its publish),
// resumed past the takeover bound — longer than the leases of the
// approach's own background work — and counted once resumed.
const Pause Fault = "pause"

type pause struct{}

func (pause) Name() Fault { return Pause }
func (pause) How() string {
	return "SIGSTOPs at a before-write point, each resumed past the lease and a worker sent to the key (every other one at the approach's aim point, if it has one, resumed past 5 s and the lease)"
}
func (pause) counts() string {
	return "a worker sent to the key took it over or was kept out of it"
}
func (pause) bites()                {}
func (pause) pointArmed()           {}
func (pause) start(r *run) injector { return &pauseRun{r: r} }

type pauseRun struct {
	r *run
	n atomic.Int64 // the pauses so far, for aimAt
}

// inject stops v at its next before-write point (or, every other time on
// an Aimer, at its aim point) with SIGSTOP and, once the process is seen
// stopped, resumes it past the lease and a taker; it counts the pause once
// a taker came (countTaking), or, at an aim point, once resumed.
func (p *pauseRun) inject(ctx context.Context, v *proc) {
	r := p.r
	at, ok := r.armAimed(ctx, Pause, v, &p.n, modeStop, arm{Mode: modeStop, Skip: r.blind()})
	if !ok {
		return
	}
	if !stopped(ctx, v) {
		_ = v.signal(sigCont)
		if ctx.Err() == nil {
			r.log.note("pause: worker %d was not seen stopped after its SIGSTOP; not counted", v.client)
		}
		r.finish(ctx, v, at, true, Pause)
		return
	}
	if at.Key == "" {
		// An aim point outside any operation: no key for a taker. Stopped
		// past the takeover bound, the worker is past the leases of its
		// background work (a relay's on its partitions), which others
		// take over and do. Its request in flight, stopped with it, has
		// its idle transaction ended once it holds up another worker.
		_, n := r.waitEndingIdle(ctx, v, r.takeoverBound(), nil)
		r.noteEnded(Pause, v, "at "+at.Name, n)
		_ = v.signal(sigCont)
		r.log.span(v.client, report.SpanPause, at.T, history.Now(), "SIGSTOP at "+at.Name)
		r.finish(ctx, v, at, true, Pause)
		r.log.count(Pause)
		return
	}
	t := r.takeover(ctx, v, at, false)
	_ = v.signal(sigCont)
	r.log.span(v.client, report.SpanPause, at.T, history.Now(), fmt.Sprintf("SIGSTOP on %s", at.Key))
	r.finish(ctx, v, at, true, Pause)
	r.countTaking(ctx, Pause, v, at, t, true)
}
