package engine

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// sessionName is the application_name of the database sessions of the
// worker whose client number is client in the run tagged run
// (workerConfig.Run): what tells the coordinator whose transaction blocks
// whose (blockedBy).
func sessionName(run string, client int) string {
	return fmt.Sprintf(sessionFormat, strconv.Itoa(client), run)
}

// sessionFormat is sessionName's format; sessionsOf is its LIKE pattern
// for every worker of a run.
const sessionFormat = "lockfree w%s %s"

func sessionsOf(run string) string { return fmt.Sprintf(sessionFormat, "%", run) }

// sqlBlockedBy reports whether a session of the run ($1, a LIKE pattern)
// other than the victim's ($2) waits on a lock a session of the victim's
// holds.
const sqlBlockedBy = `SELECT EXISTS (
	SELECT 1 FROM pg_stat_activity w
	WHERE w.application_name LIKE $1 AND w.application_name <> $2 AND w.wait_event_type = 'Lock'
	AND EXISTS (SELECT 1 FROM pg_stat_activity b
		WHERE b.pid = ANY (pg_blocking_pids(w.pid)) AND b.application_name = $2))`

// blockedBy reports whether another worker of the run waits on a lock that
// one of v's database sessions holds: v, stopped or cut off inside its
// transaction, keeps the rows it wrote or locked from the worker sent to
// take its key over. No wait changes that while the fault holds v; in
// production it lasts until the server ends v's session
// (idle_in_transaction_session_timeout, TCP keepalives). False when it
// cannot tell.
func (r *run) blockedBy(ctx context.Context, v *proc) bool {
	if r.admin == nil || r.tag == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var blocked bool
	err := r.admin.QueryRow(ctx, sqlBlockedBy, sessionsOf(r.tag), sessionName(r.tag, v.client)).Scan(&blocked)
	return err == nil && blocked
}

// waitUnblocked waits up to d until cond holds (a condition on the
// monitor, as monitor.wait), and reports whether it does. It gives up
// early, blocked, once another worker waits on a lock v's session holds
// (blockedBy): held on, v would only keep it waiting.
func (r *run) waitUnblocked(ctx context.Context, d time.Duration, v *proc, cond func() bool) (ok, blocked bool) {
	deadline := time.Now().Add(d)
	for {
		step := min(250*time.Millisecond, max(0, time.Until(deadline)))
		if r.mon.wait(ctx, step, cond) {
			return true, false
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			return false, false
		}
		if r.blockedBy(ctx, v) {
			return false, true
		}
	}
}

// idleTimeout is how long a stopped worker's transaction may keep another
// worker waiting on its locks while a fault holds it for work of its own
// that no taker is sent to (waitEndingIdle): as a server's
// idle_in_transaction_session_timeout would, at a second.
const idleTimeout = time.Second

// sqlEndIdleBlockers ends the sessions of the victim ($2) that are idle
// inside a transaction and hold a lock another session of the run ($1, a
// LIKE pattern) waits on, and counts them.
const sqlEndIdleBlockers = `SELECT count(pg_terminate_backend(b.pid)) FROM pg_stat_activity b
	WHERE b.application_name = $2 AND b.state LIKE 'idle in transaction%'
	AND EXISTS (SELECT 1 FROM pg_stat_activity w
		WHERE w.application_name LIKE $1 AND w.application_name <> $2 AND b.pid = ANY (pg_blocking_pids(w.pid)))`

// waitEndingIdle waits up to d, while v is held stopped, until cond holds
// (a condition on the monitor, as monitor.wait; nil for none: the whole
// of d). Each time v keeps another worker waiting on its locks
// (waitUnblocked), it gives it idleTimeout more, then ends v's idle
// transactions that still do, as the server's
// idle_in_transaction_session_timeout would: the stopped process's request
// in flight, or its consumer's batch, would otherwise hold up every worker
// that needs those rows for the whole stop. It reports whether cond held,
// and how many transactions it ended.
func (r *run) waitEndingIdle(ctx context.Context, v *proc, d time.Duration, cond func() bool) (held bool, ended int64) {
	if cond == nil {
		cond = func() bool { return false }
	}
	deadline := time.Now().Add(d)
	for {
		held, blocked := r.waitUnblocked(ctx, time.Until(deadline), v, cond)
		if !blocked {
			return held, ended
		}
		if r.mon.wait(ctx, min(idleTimeout, max(0, time.Until(deadline))), cond) {
			return true, ended
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			return false, ended
		}
		ended += r.endIdleBlockers(ctx, v)
	}
}

// noteEnded notes the idle transactions of v that f ended, stopped at
// where (waitEndingIdle), if any.
func (r *run) noteEnded(f Fault, v *proc, where string, n int64) {
	if n > 0 {
		r.log.note("%s: worker %d, stopped %s, kept another worker waiting on its idle transaction's locks for %v: "+
			"%d such transactions ended, as idle_in_transaction_session_timeout would", f, v.client, where, idleTimeout, n)
	}
}

// endIdleBlockers ends v's idle transactions that another worker waits on
// (sqlEndIdleBlockers), and returns how many it ended.
func (r *run) endIdleBlockers(ctx context.Context, v *proc) int64 {
	if r.admin == nil || r.tag == "" {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var n int64
	if err := r.admin.QueryRow(ctx, sqlEndIdleBlockers, sessionsOf(r.tag), sessionName(r.tag, v.client)).Scan(&n); err != nil {
		return 0
	}
	return n
}
