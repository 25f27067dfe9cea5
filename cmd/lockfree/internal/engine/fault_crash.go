package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// The crash fault: a supervisor restarting a crashed pod.
const (
	// Crash kills a worker with SIGKILL at its next before-write point (on
	// an Aimer, every other time at its aim point) and at once starts a
	// replacement process with the same identity — the same client, member
	// and holder names — whose old lease is still in force: the replacement
	// must wait until it lapses (a partition member's Join, a lock's acquire
	// under the same holder). The killed operation's outcome is unknown.
	Crash Fault = "crash"
	// CrashRestartFailed counts, in a report, the replacements of crashed
	// workers that never became ready; it is not a fault to ask for.
	CrashRestartFailed Fault = "crash-restart-failed"
)

type crash struct{}

func (crash) Name() Fault { return Crash }
func (crash) How() string {
	return "SIGKILLs at a before-write point (every other one at the approach's aim point, if it has one), each followed at once by a replacement with the same identity (client number, member and holder names, proxies) and no warm-up, while the killed lease is in force"
}
func (crash) counts() string {
	return "the worker was killed; a replacement that exits or is not ready in time also counts as `crash-restart-failed`"
}
func (crash) start(r *run) injector { return &crashRun{r: r} }
func (crash) pointArmed()           {}

// crashRun is the crash fault in one run: its replacements so far.
type crashRun struct {
	r        *run
	replaced int
	n        atomic.Int64 // aimed injections and those that could be (aimAt)
}

// inject kills v with SIGKILL at its next before-write point and starts
// its replacement at once, then waits until the replacement is ready (or
// counts a failed restart). The replacement's process is spawned before v
// is armed, so that what follows the kill is what a supervisor's restart
// does: the client's start — its Join, its first acquire — under the
// crashed one's names, with the crashed one's lease still in force.
func (c *crashRun) inject(ctx context.Context, v *proc) {
	r := c.r
	lane := r.cfg.Clients + 1 + c.replaced // Clients is the check's lane (a scenario's final read)
	spare, err := r.fleet.spawn(lane)
	if err != nil {
		r.log.note("crash: spawning the replacement of worker %d: %v", v.client, err)
		return
	}
	at, ok := r.armAimed(ctx, Crash, v, &c.n, modeWait, arm{Mode: modeWait})
	if !ok {
		spare.kill()
		<-spare.done
		return
	}
	// The operation waits at its point, its write unsent, until the kill.
	_ = v.signal(syscall.SIGKILL)
	killed := history.Now()
	v.crashed = true
	cfg := v.cfg
	identity := cfg.Client
	if cfg.Replaces != nil {
		identity = *cfg.Replaces
	}
	// The replacement is the same pod restarted: same names, same network
	// (the crashed one's proxies), no warm-up: it goes on with the run.
	cfg.Client, cfg.Replaces, cfg.Warmup = lane, &identity, 0
	if err := spare.configure(cfg, v.proxy, v.kafka); err != nil {
		r.log.count(Crash)
		r.log.count(CrashRestartFailed)
		r.log.note("crash: worker %d killed, its replacement not configured: %v", v.client, err)
		return
	}
	v.proxy, v.kafka = nil, nil // the replacement's now: closed once
	spare.command(command{Cmd: cmdGo})
	r.fleet.add(spare)
	c.replaced++
	r.log.lane(lane, identity)
	r.log.count(Crash)
	r.log.span(v.client, report.SpanCrash, at.T, killed, fmt.Sprintf("SIGKILL %s; restarted as lane %d", at.where(), lane))
	c.restarted(ctx, spare, identity)
}

// restarted waits until the replacement p of worker identity is ready, and
// counts a failed restart when it exits first or is not ready in time:
// its client's start waits for the crashed one's lease, and a partition
// member also for the fleet to settle.
func (c *crashRun) restarted(ctx context.Context, p *proc, identity int) {
	r := c.r
	bound := r.prot.Lease + r.margin() + r.params.OpTimeout + time.Minute
	up := r.mon.wait(ctx, bound, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.ready || p.exited()
	})
	switch {
	case !up && ctx.Err() != nil:
		return // the run ended first: its halt finds out how it went
	case !up:
		p.kill()
		p.crashed = true // counted here, not noted again as a death
		<-p.done
		r.log.count(CrashRestartFailed)
		r.log.note("crash: the replacement of worker %d was not ready within %v: killed", identity, bound)
	case p.exited():
		<-p.done
		r.log.count(CrashRestartFailed)
		r.log.note("crash: the replacement of worker %d failed: %v", identity, p.died())
	}
}
