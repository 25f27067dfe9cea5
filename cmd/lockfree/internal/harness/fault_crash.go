package harness

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// The crash fault: a supervisor restarting a crashed pod.
const (
	// Crash kills a worker with SIGKILL at its next before-write point and
	// at once starts a replacement process with the same identity — the
	// same client, member and holder names — whose old lease is still in
	// force: the replacement must wait until it lapses (a partition
	// member's Join, a lock's acquire under the same holder). The killed
	// operation's outcome is unknown.
	Crash Fault = "crash"
	// CrashRestartFailed counts, in a report, the replacements of crashed
	// workers that never became ready; it is not a fault to ask for.
	CrashRestartFailed Fault = "crash-restart-failed"
)

const crashHow = "SIGKILLs of one worker at a before-write point, each followed at once by a replacement process with the same identity (client number, member and holder names) while the killed one's lease was still in force"

// crashSkip says why a crash means nothing in def's runs.
func crashSkip(def ApproachDef) string {
	if def.Scenario() == "events" {
		return "its producers number each entity's events in process memory: a replacement would number them again from the first, which the check must refuse whatever the approach"
	}
	return ""
}

// crashOnce kills v with SIGKILL at its next before-write point and starts
// its replacement at once, then waits until the replacement is ready (or
// counts a failed restart). The replacement's process is spawned before v
// is armed, so that what follows the kill is what a supervisor's restart
// does: the client's start — its Join, its first acquire — under the
// crashed one's names, with the crashed one's lease still in force.
func crashOnce(ctx context.Context, r *run, v *proc) {
	lane := r.cfg.Clients + 1 + len(r.replaced) // Clients is the documents' check lane
	spare, err := r.spawn(lane)
	if err != nil {
		r.note("crash: spawning the replacement of worker %d: %v", v.client, err)
		return
	}
	at, ok := r.armPoint(ctx, Crash, v, arm{Mode: modeWait})
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
		r.count(Crash)
		r.count(CrashRestartFailed)
		r.note("crash: worker %d killed, its replacement not configured: %v", v.client, err)
		return
	}
	v.proxy, v.kafka = nil, nil // the replacement's now: closed once
	spare.command(command{Cmd: cmdGo})
	r.procs = append(r.procs, spare)
	r.mu.Lock()
	r.replaced[lane] = identity
	r.mu.Unlock()
	r.count(Crash)
	r.span(v.client, report.SpanCrash, at.T, killed, fmt.Sprintf("SIGKILL on %s; restarted as lane %d", at.Key, lane))
	r.restarted(ctx, spare, identity)
}

// restarted waits until the replacement p of worker identity is ready, and
// counts a failed restart when it exits first or is not ready in time:
// its client's start waits for the crashed one's lease, and a partition
// member also for the fleet to settle.
func (r *run) restarted(ctx context.Context, p *proc, identity int) {
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
		r.count(CrashRestartFailed)
		r.note("crash: the replacement of worker %d was not ready within %v: killed", identity, bound)
	case p.exited():
		<-p.done
		r.count(CrashRestartFailed)
		r.note("crash: the replacement of worker %d failed: %v", identity, p.died())
	}
}

// spawn spawns a worker process for lane, which waits for its
// configuration.
func (r *run) spawn(lane int) (*proc, error) {
	exe := r.cfg.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("harness: finding the worker binary: %w", err)
		}
	}
	return spawnProc(exe, r.cfg.Args, r.cfg.Env, lane, r.mon, r.cfg.Stderr)
}
