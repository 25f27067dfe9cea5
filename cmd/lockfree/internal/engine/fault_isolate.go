package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
)

// Isolate cuts a worker off at its before-write point — its proxy holds
// every byte, its write included — past the lease until another worker,
// sent to the key, has taken it over or been kept out of it, then resets
// its connections: the write never lands. A cut no other worker came for
// is not counted. On an Aimer, every other cut is at its aim point (a
// relay's publish, say), held past the lease, and counted when the proxy
// held bytes: the request's sender cannot know whether it landed.
const Isolate Fault = "isolate"

type isolate struct{}

func (isolate) Name() Fault { return Isolate }
func (isolate) How() string {
	return "cuts of one worker's connections at a before-write point, held past the lease and a worker sent to the key, then reset: the write never lands (every other one at the approach's aim point, if it has one, held past the lease alone)"
}
func (isolate) counts() string {
	return "the proxy held bytes and a worker sent to the key took it over or was kept out of it (at an aim point: the proxy held bytes)"
}
func (isolate) networked()            {}
func (isolate) pointArmed()           {}
func (isolate) start(r *run) injector { return &cutRun{r: r, f: Isolate} }

// aimedCut is the shortest cut at an aim point (cutRun.inject).
const aimedCut = 1500 * time.Millisecond

// cutRun holds a worker's traffic at its before-write point: Isolate, or,
// when it delivers the held bytes, Delay (fault_delay.go).
type cutRun struct {
	r       *run
	f       Fault
	deliver bool
	n       atomic.Int64 // the cuts so far, for aimAt
}

// inject holds v's traffic from its next before-write point on, past the
// lease and a taker, then delivers it (late) or resets it. It counts the
// cut only when the proxy held bytes and a taker came.
func (c *cutRun) inject(ctx context.Context, v *proc) {
	r, f := c.r, c.f
	a := arm{Mode: modeWait}
	if c.deliver {
		a.Skip = r.blind()
	}
	at, ok := r.armAimed(ctx, f, v, &c.n, modeWait, a)
	if !ok {
		return
	}
	before := v.held()
	v.cut(faultproxy.Hold, false)
	from := history.Now()
	v.command(command{Cmd: cmdClear}) // the write goes into the cut
	held := func() int64 { return v.held() - before }
	caught := poll(ctx, 2*time.Second, func() bool { return held() > 0 })
	var t taking
	if aimed := at.Key == ""; aimed {
		// An aim point of the approach's own, outside any operation (a
		// relay's publish): no key for a taker. The cut lasts the lease
		// and its margin, a blip the worker must decide about alone: held
		// much longer, another worker would take its work over and do
		// it, whatever the cut one decides. It lasts aimedCut at least:
		// the worker's next statement then goes out on a new connection
		// (a pool checks one idle for a second before it lends it), not
		// on one the reset broke, and what it decided lands.
		Sleep(ctx, max(r.prot.Lease+r.margin(), aimedCut))
	} else {
		t = r.takeover(ctx, v, at, false)
	}
	n := held()
	r.log.cut(v.client, from, history.Now())
	v.cut(faultproxy.Pass, c.deliver)
	end := history.Now()
	if caught && n > 0 {
		r.log.span(v.client, report.SpanIsolate, at.T, end, fmt.Sprintf("%s %s: %d bytes held", f, at.where(), n))
	}
	r.finish(ctx, v, at, true, f)
	switch {
	case caught && n > 0 && at.Key == "":
		r.log.count(f)
	case caught && n > 0:
		r.countTaking(ctx, f, v, at, t, true)
	case ctx.Err() == nil:
		r.log.note("%s: worker %d sent nothing into the cut; not counted", f, v.client)
	}
}
