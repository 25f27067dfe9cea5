package engine

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
)

// LostCommit loses the answer to a worker's COMMIT: its proxy forwards the
// COMMIT, the server commits, and the worker's connection is reset before
// the answer reaches it. The worker cannot tell whether its transaction
// took effect; one that retries it must find it did. It runs on the
// approaches whose workers commit transactions of their own (Committer);
// on an Aimer, every other one loses the COMMIT after its aim point.
const LostCommit Fault = "lost-commit"

type lostCommit struct{}

func (lostCommit) Name() Fault { return LostCommit }
func (lostCommit) How() string {
	return "COMMITs the server committed whose answer the worker's proxy dropped, resetting the connection"
}
func (lostCommit) counts() string {
	return "the proxy lost an answer"
}
func (lostCommit) networked()            {}
func (lostCommit) start(r *run) injector { return &lostCommitRun{r: r} }

// NoCommitOfItsOwn is why lost-commit skips an approach that is no
// Committer and says no more (FaultSkipper).
const NoCommitOfItsOwn = "each of its writes is one statement or one pipelined batch in autocommit: it sends no COMMIT of its own (a lost answer to one of those is lost-reply's)"

// CommitInBatch is why lost-commit skips an approach on
// idempotency.Postgres (FaultSkipper).
const CommitInBatch = "idempotency.Postgres sends its COMMIT in one batch with the key's record, which a lone COMMIT's match never sees: lost-reply loses that batch's answer"

func (lostCommit) skip(_ Scenario, def ApproachDef) string {
	if _, ok := def.(Committer); ok {
		return ""
	}
	if s, ok := def.(FaultSkipper); ok && s.SkipFault(LostCommit) != "" {
		return "" // its own reason (FaultSkip)
	}
	return NoCommitOfItsOwn
}

type lostCommitRun struct {
	r *run
	n atomic.Int64 // injections aimed or not (loseAimed)
}

func (l *lostCommitRun) inject(ctx context.Context, v *proc) {
	loseAimed(ctx, l.r, v, LostCommit, &l.n, faultproxy.PostgresCommit, "a COMMIT")
}

// loseAimed loses the answer to v's next request that contains req; on an
// Aimer, every other injection (n counts them, the first among them) first
// holds v at the aim point, arms the proxy, then lets v go on. Held at no
// aim point in time, it loses the next answer all the same.
func loseAimed(ctx context.Context, r *run, v *proc, f Fault, n *atomic.Int64, req []byte, what string) {
	if point := aimAt(r, f, n); point != "" {
		if _, ok := r.armPoint(ctx, f, v, arm{Mode: modeWait, Point: point}); ok {
			loseAnswer(ctx, r, v, f, req, what+" after "+point, func() { v.command(command{Cmd: cmdClear}) })
			return
		}
		missedAim(n)
	}
	loseAnswer(ctx, r, v, f, req, what, nil)
}

// loseAnswer loses the answer to v's next request that contains req (what
// names it), and counts it as f once its proxy lost one: the server acted
// on it, and v's connection was reset before the answer came. It then
// leaves v a margin to find out what happened. release, if not nil, lets
// v go on from a point it is held at, once the proxy is armed.
func loseAnswer(ctx context.Context, r *run, v *proc, f Fault, req []byte, what string, release func()) {
	before := v.proxy.Stats().LostReplies
	lost := func() bool { return v.proxy.Stats().LostReplies > before }
	from := history.Now()
	v.proxy.LoseReply(req)
	if release != nil {
		release()
	}
	if !poll(ctx, r.reachBound(), lost) {
		v.proxy.LoseReply(nil)
		// It may have matched a request as it was disarmed: that
		// request's answer is on its way, and is lost.
		if !poll(ctx, time.Second, lost) {
			if ctx.Err() == nil {
				r.log.note("%s: worker %d sent no %s within %v; not counted", f, v.client, what, r.reachBound())
			}
			return
		}
	}
	r.log.count(f)
	r.log.span(v.client, report.SpanIsolate, from, history.Now(), string(f)+": "+what+" went through, its answer was lost")
	Sleep(ctx, r.margin())
}
