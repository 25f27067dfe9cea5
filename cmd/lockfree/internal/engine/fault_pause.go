package engine

import (
	"context"
	"fmt"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// Pause stops a worker with SIGSTOP at its next before-write point — after
// its read, claim or acquire, before its write — and resumes it with
// SIGCONT once the lease that protects the approach has run out and another
// worker, sent to the key, has taken it over or been kept out of it. A
// pause no other worker came for is not counted.
const Pause Fault = "pause"

type pause struct{}

func (pause) Name() Fault { return Pause }
func (pause) How() string {
	return "SIGSTOPs at a before-write point, each resumed past the lease and a worker sent to the key"
}
func (pause) counts() string {
	return "a worker sent to the key took it over or was kept out of it"
}
func (pause) bites()                {}
func (pause) pointArmed()           {}
func (pause) start(r *run) injector { return pauseRun{r} }

type pauseRun struct{ r *run }

// inject stops v at its next before-write point with SIGSTOP and, once the
// process is seen stopped, resumes it past the lease and a taker; it counts
// the pause once a taker came (countTaking).
func (p pauseRun) inject(ctx context.Context, v *proc) {
	r := p.r
	at, ok := r.armPoint(ctx, Pause, v, arm{Mode: modeStop, Skip: r.blind()})
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
	t := r.takeover(ctx, v, at, false)
	_ = v.signal(sigCont)
	r.log.span(v.client, report.SpanPause, at.T, history.Now(), fmt.Sprintf("SIGSTOP on %s", at.Key))
	r.finish(ctx, v, at, true, Pause)
	r.countTaking(ctx, Pause, v, at, t, true)
}
