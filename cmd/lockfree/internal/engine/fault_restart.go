package engine

import (
	"context"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// The restart fault.
const (
	// Restart stops and starts the PostgreSQL server mid-run.
	Restart Fault = "restart"
	// RestartFailed counts, in a report, the restarts that failed; it is
	// not a fault to ask for.
	RestartFailed Fault = "restart-failed"
)

type restart struct{}

func (restart) Name() Fault { return Restart }
func (restart) How() string {
	return "restarts of the PostgreSQL server (pg_ctl restart, or --restart-cmd) a third of the way into the run, breaking every connection"
}
func (restart) counts() string {
	return "the server restarted; else `restart-failed`, and a server compare cannot restart fails the run"
}
func (restart) wholeRun()             {}
func (restart) start(r *run) injector { return restartRun{r} }

// done: a restart that failed has had its one chance.
func (restart) done(count func(Fault) int64) bool {
	return count(Restart) > 0 || count(RestartFailed) > 0
}

type restartRun struct{ r *run }

// inject restarts the server once, a third of the way into the run.
func (s restartRun) inject(ctx context.Context, _ *proc) {
	r := s.r
	if r.infra.Restart == nil {
		r.log.note("restart: this server cannot be restarted from here (use the embedded server or --restart-cmd)")
		return
	}
	if !Sleep(ctx, r.cfg.Duration/3) {
		return
	}
	from := history.Now()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	err := r.infra.Restart(rctx)
	cancel()
	if err != nil {
		r.log.count(RestartFailed)
		r.log.note("restart failed: %v", err)
		return
	}
	r.log.count(Restart)
	r.log.span(-1, report.SpanRestart, from, history.Now(), "PostgreSQL restart")
}
