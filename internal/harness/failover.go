package harness

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/internal/pgschema"
	"github.com/lockfree-go/lockfree/internal/replpair"
	"github.com/lockfree-go/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/migrate"
)

// The failover fault fails over the database of the lock service, not the
// resource's: a lease lock's leases and tokens live in the primary that is
// killed, the rows the clients write live in Infra.URL, which stays. On one
// database for both, the WAL the promoted standby never received would take
// acknowledged writes with it, and every approach's history would fail the
// check whatever its fences: the fault would say nothing about fencing.

// failoverScenarios are the scenarios the failover fault runs: those whose
// lock-based approaches take their leases from the lock service
// (Env.Locks), where a token that goes back lets a stale holder write, and
// whose clients share keys, so that another can take the stopped one's key
// over. Not payments: each payment's key is one client's, and no other
// client reaches it.
var failoverScenarios = []string{"inventory", "documents", "accounts"}

// failoverMints is how many leases (or, for an approach that takes none,
// operations) the clients must have been granted while the standby is held
// before a victim is stopped: more than a sequence logs ahead of its WAL
// (32), so that the plain sequence hands out values the standby has no
// record of.
const failoverMints = 40

// lsnSQL reads a node's WAL position: written on a primary, replayed on a
// standby.
const lsnSQL = `SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END::text`

// failoverOpTimeout is added to the default bound of an operation under the
// failover fault: the stopped client's operation must outlast the steps of
// a failover (kill, promotion, the others reconnecting), or its write would
// end with its context instead of landing.
const failoverOpTimeout = time.Minute

// sqlLostMarker is written on the primary once the standby is held, so that
// every failover loses WAL, whether or not the approach keeps anything in
// the lock service (an alternative keeps nothing there).
const sqlLostMarker = `CREATE TABLE failover_lost AS SELECT clock_timestamp() AS held_at`

// failoverSkip says why def does not run in a run with cfg's faults, or "":
// a fault that cannot take effect in it (FaultSkip), or the failover's
// reasons.
func failoverSkip(cfg Config, def ApproachDef) string {
	for _, f := range cfg.Faults {
		if why := FaultSkip(f, def); why != "" {
			return why
		}
	}
	on := slices.Contains(cfg.Faults, Failover)
	_, foil := def.(plainTokenLock)
	switch {
	case foil && !on:
		return "runs only under the failover fault: its tokens differ from the fenced lock's only across a failover"
	case on && def.Approach() == VerifiedLock:
		return "Verify proves the lease in the resource's own transaction, and the failover fault puts the lock service in another database"
	case on && !slices.Contains(failoverScenarios, def.Scenario()):
		return "the failover fault runs on " + strings.Join(failoverScenarios, ", ") + ": the scenarios whose leases live in the lock service that fails over"
	}
	return ""
}

// checkFailover refuses a run that asks for the failover fault without a
// pair to fail over.
func checkFailover(cfg Config, infra Infra) error {
	if slices.Contains(cfg.Faults, Failover) && infra.Failover == nil {
		return fmt.Errorf("%w: the failover fault needs a primary with a standby (Infra.Failover)", ErrInvalid)
	}
	return nil
}

// lockSchema brings the pair back to health (the previous approach's run
// promoted its standby) and makes the run's lock schema on its primary:
// fencedlock's tables, its tokens minted in fence eras — or, for the foil,
// by a plain nextval. It returns the workers' URL of it, every node listed.
func (r *run) lockSchema(ctx context.Context, name string) (string, func(), error) {
	pair := r.infra.Failover
	if err := pair.Restore(ctx); err != nil {
		if err := pair.Remake(ctx); err != nil {
			return "", nil, fmt.Errorf("harness: the failover pair: %w", err)
		}
	}
	url := pair.MultiURL("search_path=" + name)
	drop := func() { dropSchema(pair.MultiURL(""), name) }
	if err := pgschema.Create(ctx, pair.MultiURL(""), name); err != nil {
		return "", nil, fmt.Errorf("harness: the failover pair: %w", err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		drop()
		return "", nil, err
	}
	defer pool.Close()
	if err := migrate.Up(ctx, pool, migrate.Names{}, fencedlock.Migrations()); err != nil {
		drop()
		return "", nil, fmt.Errorf("harness: migrating the lock schema: %w", err)
	}
	if _, foil := r.def.(plainTokenLock); foil {
		if _, err := pool.Exec(ctx, sqlPlainMint); err != nil {
			drop()
			return "", nil, fmt.Errorf("harness: the plain tokens of the foil: %w", err)
		}
	}
	return url, drop, nil
}

// dropSchema drops schema name at url, retrying for a minute while a server
// comes back.
func dropSchema(url, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = pgschema.Drop(ctx, url, name)
}

// lockPool connects a worker to its lock service on the failover pair. Its
// connections go to whichever node accepts writes.
func (w *worker) lockPool(ctx context.Context, tr *tracer) (*pgxpool.Pool, error) {
	return dial(ctx, "lock database", w.cfg.LockDB, tr)
}

// failoverStep is one failover fault in progress.
type failoverStep struct {
	r    *run
	pair *replpair.Pair
	v    *proc
	at   event
	// promoted is when the promoted standby accepted writes.
	promoted history.Time
}

// failoverFault fails the lock service over once, a fifth of the way into
// the run: the standby is held from receiving WAL while the clients take
// leases, a client is stopped at its before-write point holding one of
// them, the primary is killed and the standby promoted. Once another client
// has taken the stopped one's key over on the promoted node and written,
// the stopped one resumes: its write is refused only if its token is below
// the taker's. The fault counts when WAL was lost and, for the foil, when
// its plain tokens went back.
func failoverFault(ctx context.Context, r *run) {
	if !sleep(ctx, r.cfg.Duration/5) {
		return
	}
	f := &failoverStep{r: r, pair: r.infra.Failover}
	// The pair's steps run to their end even if the run ends meanwhile:
	// a half-done step would leave the next run a pair in no known state.
	pctx := context.WithoutCancel(ctx)
	if err := f.hold(ctx, pctx); err != nil {
		r.note("failover: %v", err)
		return
	}
	if !f.stopVictim(ctx) {
		return
	}
	from := history.Now()
	lost, err := f.promote(pctx)
	if err != nil {
		f.contOthers()
		_ = f.v.signal(sigCont)
		r.note("failover: %v", err)
		r.finish(ctx, f.v, f.at, false, Failover)
		return
	}
	r.span(-1, report.SpanFailover, from, f.promoted, fmt.Sprintf("failover: primary killed, standby promoted, %d bytes of WAL lost", lost))
	r.mu.Lock()
	r.forgot = append(r.forgot, f.promoted)
	r.mu.Unlock()
	// Once the primary is gone the fault runs to its end, each wait
	// bounded, even past the measured part: its workers go on until it
	// returns.
	taken, wentBack := f.takeover(pctx)
	f.resume(pctx, taken)
	_, foil := r.def.(plainTokenLock)
	switch {
	case lost <= 0:
		r.note("failover: the promoted standby had received all the WAL; not counted")
	case foil && !wentBack:
		r.note("failover: the plain tokens did not go back as far as the taker's write (no lease on %s after the promotion at or below the stopped client's token %d, or the taker wrote above it); not counted", f.at.Key, f.at.Token)
	case taken:
		r.count(Failover)
	}
}

// hold waits until the standby has replayed the run's schemas, holds it,
// and waits until the clients have been granted failoverMints leases.
func (f *failoverStep) hold(ctx, pctx context.Context) error {
	if err := f.waitReplayed(ctx); err != nil {
		return err
	}
	if err := f.pair.HoldStandby(pctx); err != nil {
		return err
	}
	held := history.Now()
	if err := f.exec(ctx, sqlLostMarker); err != nil {
		return err
	}
	if !f.r.mon.wait(ctx, f.r.cfg.Duration/3, func() bool { return f.r.mon.mintedSinceLocked(held) >= failoverMints }) && ctx.Err() == nil {
		f.r.note("failover: fewer than %d leases or operations while the standby was held", failoverMints)
	}
	return ctx.Err()
}

// exec runs sql in the run's lock schema, on the primary.
func (f *failoverStep) exec(ctx context.Context, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.r.lockURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// waitReplayed waits until the standby has replayed what the primary has
// written so far.
func (f *failoverStep) waitReplayed(ctx context.Context) error {
	target, err := f.lsn(ctx, f.pair.Primary())
	if err != nil {
		return err
	}
	for {
		at, err := f.lsn(ctx, f.pair.Standby())
		if err != nil {
			return err
		}
		if at >= target {
			return nil
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// lsn returns node n's WAL position (lsnSQL) as a number.
func (f *failoverStep) lsn(ctx context.Context, n replpair.Node) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.pair.URL(n, ""))
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var s *string
	if err := conn.QueryRow(ctx, lsnSQL).Scan(&s); err != nil {
		return 0, fmt.Errorf("%v: %w", n, err)
	}
	if s == nil {
		return 0, fmt.Errorf("%v has no WAL position", n)
	}
	return parseLSN(*s)
}

// parseLSN parses a pg_lsn ("16/B374D848"): two hexadecimal halves.
func parseLSN(s string) (int64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("harness: bad WAL position %q", s)
	}
	return int64(h<<32 | l), nil
}

// stopVictim stops a client with SIGSTOP at its next before-write point,
// trying the clients in turn until one is seen stopped or the run ends.
func (f *failoverStep) stopVictim(ctx context.Context) bool {
	for i := 0; ctx.Err() == nil; {
		v, _ := f.r.victim(&i)
		if v == nil {
			sleep(ctx, 10*time.Millisecond)
			continue
		}
		at, ok := f.r.armPoint(ctx, Failover, v, arm{Mode: modeStop})
		if !ok {
			continue
		}
		stopped := poll(ctx, 5*time.Second, func() bool { s, err := v.stopped(); return s || err != nil })
		if s, _ := v.stopped(); stopped && s {
			f.v, f.at = v, at
			// Its lease outlives the steps of the failover on the old
			// primary's clock: the others must not take it over there.
			f.stopOthers(ctx, -1)
			return true
		}
		_ = v.signal(sigCont)
		f.r.finish(ctx, v, at, true, Failover)
	}
	return false
}

// promote kills the primary and promotes the standby. It returns how many
// bytes of WAL the primary had written that the standby never replayed (at
// least: the primary wrote on until it was killed).
func (f *failoverStep) promote(ctx context.Context) (int64, error) {
	old := f.pair.Primary()
	written, err := f.lsn(ctx, old)
	if err != nil {
		return 0, err
	}
	replayed, err := f.lsn(ctx, f.pair.Standby())
	if err != nil {
		return 0, err
	}
	if err := f.pair.Kill(ctx, old); err != nil {
		return 0, err
	}
	if err := f.pair.Promote(ctx); err != nil {
		return 0, err
	}
	f.promoted = history.Now()
	return written - replayed, nil
}

// takeover makes the interleaving that shows a fence that went back. The
// other clients are armed to hold at their before-write point on the
// stopped client's key; once one of them, the taker, is held there — it
// found the promoted node through its multi-host URL, was granted the key
// and read — every other client is stopped, so that nothing else is
// granted or read; the taker writes, and is parked before its next
// operation (cmdStep), so that no later lease of its own raises the fence
// before the stopped client's write has landed: the stopped client's write
// is the next to reach the key whatever the scheduler does. It reports
// whether the taker wrote, and whether its token was at or below the
// stopped client's: the tokens went back.
func (f *failoverStep) takeover(ctx context.Context) (taken, wentBack bool) {
	m, key := f.r.mon, f.at.Key
	for _, p := range f.r.procs {
		if p != f.v {
			p.command(command{Cmd: cmdArm, Arm: &arm{Mode: modeHold, Key: key}})
		}
	}
	// Armed before they run again: the first of them to take the key over
	// on the promoted node is held.
	f.contOthers()
	bound := f.r.takeoverBound() + time.Minute // the clients reconnect first
	var held pointSeen
	if !m.wait(ctx, bound, func() bool {
		for _, p := range m.points {
			if p.client != f.v.client && p.ev.Ev == evPoint && p.ev.Mode == modeHold && p.ev.Key == key && p.ev.T > f.promoted {
				held = p
				return true
			}
		}
		return false
	}) {
		if ctx.Err() == nil {
			f.r.note("failover: no other client reached its write on %s within %v of the promotion", key, bound)
		}
		return false, false
	}
	f.stopOthers(ctx, held.client)
	taker := f.r.procs[slices.IndexFunc(f.r.procs, func(p *proc) bool { return p.client == held.client })]
	// Its write goes on, and its next operation is parked in the same
	// step of the worker (step): finish clears it once the stopped
	// client's operation has completed.
	taker.command(command{Cmd: cmdStep})
	taken = m.wait(ctx, f.r.params.OpTimeout+10*time.Second, func() bool { return m.completedLocked(held.ev.Op) })
	f.r.note("failover: client %d took %s over on the promoted node with token %d; the stopped client %d holds token %d", held.client, key, held.ev.Token, f.v.client, f.at.Token)
	if held.ev.Token > f.at.Token {
		// The taker climbed past the stopped client's token before its
		// write (in inventory's store, its refused sales and its operations
		// on other rows take leases too): its write raised the fence above
		// the stopped client's, whatever tokens went back before it.
		return taken, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range m.leases[key] {
		if l.client != f.v.client && l.t > f.promoted && l.token <= f.at.Token {
			wentBack = true
		}
	}
	return taken, wentBack
}

// resume resumes the stopped client, whose write is now the next to land,
// waits until its operation has completed, and resumes the others.
func (f *failoverStep) resume(ctx context.Context, taken bool) {
	_ = f.v.signal(sigCont)
	f.r.span(f.v.client, report.SpanPause, f.at.T, history.Now(), fmt.Sprintf("SIGSTOP on %s across the failover", f.at.Key))
	if f.at.Op != "" {
		f.r.mon.wait(ctx, f.r.params.OpTimeout+10*time.Second, func() bool { return f.r.mon.completedLocked(f.at.Op) || f.v.exited() })
	}
	for _, p := range f.r.procs {
		_ = p.signal(sigCont)
	}
	f.r.finish(ctx, f.v, f.at, taken, Failover)
}

// stopOthers stops every client but the victim and the one numbered keep
// with SIGSTOP, and waits until each is seen stopped.
func (f *failoverStep) stopOthers(ctx context.Context, keep int) {
	for _, p := range f.r.procs {
		if p != f.v && p.client != keep && !p.exited() {
			_ = p.signal(syscall.SIGSTOP)
			poll(ctx, 5*time.Second, func() bool { s, err := p.stopped(); return s || err != nil })
		}
	}
}

// contOthers resumes every client but the victim.
func (f *failoverStep) contOthers() {
	for _, p := range f.r.procs {
		if p != f.v {
			_ = p.signal(sigCont)
		}
	}
}

// mintedSinceLocked counts the leases granted since t, or, when the run has
// seen no lease at all (an approach without a lock), the operations
// completed since t.
func (m *monitor) mintedSinceLocked(t history.Time) int {
	leases, any := 0, false
	for _, ls := range m.leases {
		for _, l := range ls {
			any = true
			if l.t > t {
				leases++
			}
		}
	}
	if any {
		return leases
	}
	ops := 0
	for _, os := range m.ok {
		for _, o := range os {
			if o.call > t {
				ops++
			}
		}
	}
	return ops
}
