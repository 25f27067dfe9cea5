package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/pgschema"
	"github.com/lockfree-go/lockfree/internal/replpair"
	"github.com/lockfree-go/lockfree/migrate"
)

// The failover fault fails over the database of the lock service, not the
// resource's: a lease lock's leases and tokens live in the primary that is
// killed, the rows the clients write live in Infra.URL, which stays. On one
// database for both, the WAL the promoted standby never received would take
// acknowledged writes with it, and every approach's history would fail the
// check whatever its fences: the fault would say nothing about fencing.

// Failover kills the lock service's primary mid-run, its standby held from
// receiving WAL, and promotes the standby, while a client that holds a
// lease whose WAL was lost is stopped at its before-write point.
const Failover Fault = "failover"

// failoverMints is how many operations the clients of an approach that
// takes no lease (an alternative) must have completed while the standby is
// held before a victim is stopped: writes whose WAL the failover loses.
const failoverMints = 40

type failover struct{}

func (failover) Name() Fault { return Failover }
func (failover) How() string {
	return "failovers of the lock service's database (its standby held from WAL, the primary killed, the standby promoted), a client stopped across each with a lease the WAL lost, resumed after another took its key over"
}
func (failover) counts() string {
	return "the promoted node lost WAL and the taker took the key over (for `plain-token-lock`, below the stopped token)"
}
func (failover) bites()                   {}
func (failover) wholeRun()                {}
func (failover) opTimeout() time.Duration { return failoverOpTimeout }
func (failover) start(r *run) injector    { return &failoverRun{r: r} }

// check refuses a run that asks for the failover fault without a pair to
// fail over.
func (failover) check(_ Config, infra Infra) error {
	if infra.Failover == nil {
		return fmt.Errorf("%w: the failover fault needs a primary with a standby (Infra.Failover)", ErrInvalid)
	}
	return nil
}

// skip: the fault runs on the scenarios that declare a victim for it
// (FailoverTarget): those whose lock-based approaches take their leases
// from the lock service, where a token that goes back lets a stale holder
// write, and whose clients share keys, so that another can take the
// stopped one's key over.
func (failover) skip(sc Scenario, _ ApproachDef) string {
	if _, ok := sc.(FailoverTarget); ok {
		return ""
	}
	var on []string
	for _, s := range Scenarios() {
		if _, ok := s.(FailoverTarget); ok {
			on = append(on, s.Name())
		}
	}
	return "the failover fault runs only where leases live in the lock service that fails over and clients share keys (" + strings.Join(on, ", ") + ")"
}

// failoverRun is the failover fault in one approach's run: the workers' URL
// of the lock schema it made on the pair.
type failoverRun struct {
	r       *run
	lockURL string
}

// failoverSlack is how far a victim's token must be above what the token
// sequence had WAL-logged when the standby was held (sqlLoggedFence): the
// values the promoted node can hand out before the taker is parked. The
// taker was stopped anywhere in an operation, and once resumed that
// operation runs on, unparked, on the promoted node: it can be granted the
// promoted node's first values before the coordinator draws the sequence
// (takeover) — one lease in most operations, two in a basket or in an edit
// that finds its document deleted and creates it. A victim holding one of
// those values would see the taker's operation in flight take its very
// token, and the taker's next one, the one held for the collision, the
// token after it.
const failoverSlack = 2

// sqlLoggedFence reads how far the lock schema's token sequence has been
// WAL-logged: nextval logs a value 32 (SEQ_LOG_VALS) ahead of the one it
// hands out and counts log_cnt down as it hands out the values in between,
// so last_value + log_cnt is the highest value any WAL record of the
// sequence carries (an increment of 1, fencedlock's). Read on the primary
// once the standby is held, it bounds what the promoted standby can know
// of the sequence: its first nextval hands out at most this value + 1.
// Tokens minted in fence eras carry the value in their low bits
// (fence.EraSize).
var sqlLoggedFence = `SELECT last_value + log_cnt FROM ` + migrate.Names{}.Table("lock_fences")

// sqlMintUpTo draws the token sequence up to %d, when it is below: the
// values between the promoted node's first and the stopped client's,
// which a busy lock service would grant to other locks' leases. It returns
// the sequence's last value after the draw.
var sqlMintUpTo = `SELECT CASE WHEN last_value < %[1]d THEN setval('` + migrate.Names{}.Table("lock_fences") + `', %[1]d) ELSE last_value END FROM ` +
	migrate.Names{}.Table("lock_fences")

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

// prepare brings the pair back to health (the previous approach's run
// promoted its standby) and makes the run's lock schema on its primary:
// fencedlock's tables, its tokens minted in fence eras — or, for the foil,
// by a plain nextval. The workers' lock service is there (run.lockDB),
// every node listed.
func (f *failoverRun) prepare(ctx context.Context, name string) (func(), error) {
	url, drop, err := f.lockSchema(ctx, name)
	if err != nil {
		return nil, err
	}
	f.lockURL, f.r.lockDB = url, url
	return drop, nil
}

func (f *failoverRun) lockSchema(ctx context.Context, name string) (string, func(), error) {
	r := f.r
	pair := r.infra.Failover
	if err := pair.Restore(ctx); err != nil {
		if err := pair.Remake(ctx); err != nil {
			return "", nil, fmt.Errorf("engine: the failover pair: %w", err)
		}
	}
	url := pair.MultiURL("search_path=" + name)
	drop := func() { dropSchema(pair.MultiURL(""), name) }
	if err := pgschema.Create(ctx, pair.MultiURL(""), name); err != nil {
		return "", nil, fmt.Errorf("engine: the failover pair: %w", err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		drop()
		return "", nil, err
	}
	defer pool.Close()
	if err := migrate.Up(ctx, pool, migrate.Names{}, fencedlock.Migrations()); err != nil {
		drop()
		return "", nil, fmt.Errorf("engine: migrating the lock schema: %w", err)
	}
	if _, foil := r.def.(plainTokenLock); foil {
		if _, err := pool.Exec(ctx, sqlPlainMint); err != nil {
			drop()
			return "", nil, fmt.Errorf("engine: the plain tokens of the foil: %w", err)
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

// failoverStep is one failover fault in progress.
type failoverStep struct {
	r       *run
	pair    *replpair.Pair
	lockURL string // the run's lock schema on the pair
	// victimKey is the scenario's (FailoverTarget): where the victim is
	// stopped.
	victimKey string
	v         *proc
	at        event
	// logged is how far the token sequence had been WAL-logged once the
	// standby was held (sqlLoggedFence): a victim's token must be above
	// it (floor), or the promoted standby would hand out tokens above it.
	logged int64
	// promoted is when the promoted standby accepted writes.
	promoted history.Time
	// resumed is set once the victim has been resumed and its operation
	// has completed.
	resumed bool
}

// inject fails the lock service over once, a fifth of the way into
// the run: the standby is held from receiving WAL while the clients take
// leases, a client is stopped at its before-write point holding one of
// them, the primary is killed and the standby promoted. Once another client
// has taken the stopped one's key over on the promoted node and written,
// the stopped one resumes: its write is refused only if its token is below
// the taker's. The fault counts when WAL was lost and, for the foil, when
// its plain tokens went back.
func (fr *failoverRun) inject(ctx context.Context, _ *proc) {
	r := fr.r
	if !Sleep(ctx, r.cfg.Duration/5) {
		return
	}
	f := &failoverStep{r: r, pair: r.infra.Failover, lockURL: fr.lockURL}
	f.victimKey = r.sc.(FailoverTarget).FailoverVictim()
	// The pair's steps run to their end even if the run ends meanwhile:
	// a half-done step would leave the next run a pair in no known state.
	pctx := context.WithoutCancel(ctx)
	if err := f.hold(ctx, pctx); err != nil {
		r.log.note("failover: %v", err)
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
		r.log.note("failover: %v", err)
		r.finish(ctx, f.v, f.at, false, Failover)
		return
	}
	r.log.span(-1, report.SpanFailover, from, f.promoted, fmt.Sprintf("failover: primary killed, standby promoted, %d bytes of WAL lost", lost))
	r.log.forget(f.promoted)
	// Once the primary is gone the fault runs to its end, each wait
	// bounded, even past the measured part: its workers go on until it
	// returns.
	taken, wentBack := f.takeover(pctx)
	f.resume(pctx, taken)
	_, foil := r.def.(plainTokenLock)
	switch {
	case lost <= 0:
		r.log.note("failover: the promoted standby had received all the WAL; not counted")
	case foil && !wentBack:
		r.log.note("failover: the plain tokens did not go back as far as the taker's write (no lease on %s after the promotion at or below the stopped client's token %d, or the taker wrote above it; the others' lease events since the promotion: %s); not counted", f.at.Key, f.at.Token, f.grantsSincePromoted())
	case taken:
		r.log.count(Failover)
	}
}

// hold waits until the standby has replayed the run's schemas, holds it,
// reads how far the token sequence has been WAL-logged, draws it up to the
// victim's floor, as a busy lock service's other leases would, and waits
// until a lease has been granted with a token above the floor (or, for an
// approach without leases, until failoverMints operations have completed):
// the clients then hold leases the promoted standby has no record of,
// neither of the lease nor of its token. Without the draw, an approach that
// mints seldom (a leader, one term per job) would wait for dozens of terms.
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
	if err := f.queryRow(ctx, sqlLoggedFence, &f.logged); err != nil {
		return err
	}
	var last int64
	if err := f.queryRow(ctx, fmt.Sprintf(sqlMintUpTo, f.floor()), &last); err != nil {
		return err
	}
	bound := max(f.r.cfg.Duration/3, 30*time.Second)
	if !f.r.mon.wait(ctx, bound, func() bool { return f.r.mon.pastLocked(held, f.floor()) }) && ctx.Err() == nil {
		f.r.log.note("failover: no lease with a token above %d (what the token sequence had WAL-logged when the standby was held, %d, and %d), nor %d operations, within %v of the hold", f.floor(), f.logged, f.floor()-f.logged, failoverMints, bound)
	}
	return ctx.Err()
}

// exec runs sql in the run's lock schema, on the primary.
func (f *failoverStep) exec(ctx context.Context, sql string) error {
	return f.queryRow(ctx, sql)
}

// queryRow runs sql in the run's lock schema, on the primary, and scans
// its one row into dest (none: sql returns no row).
func (f *failoverStep) queryRow(ctx context.Context, sql string, dest ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.lockURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if len(dest) == 0 {
		_, err = conn.Exec(ctx, sql)
		return err
	}
	return conn.QueryRow(ctx, sql).Scan(dest...)
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
		if !Sleep(ctx, 20*time.Millisecond) {
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
		return 0, fmt.Errorf("engine: bad WAL position %q", s)
	}
	return int64(h<<32 | l), nil
}

// stopVictim stops a client with SIGSTOP at its next before-write point,
// trying the clients in turn until one is seen stopped holding a lease the
// promoted standby has no record of (known) at a write that changes a row
// (rowChange), or the run ends.
func (f *failoverStep) stopVictim(ctx context.Context) bool {
	below := 0
	defer func() {
		if below > 0 {
			f.r.log.note("failover: %d clients stopped with a token at or below %d (what the token sequence had WAL-logged when the standby was held, %d, and %d) were resumed", below, f.floor(), f.logged, f.floor()-f.logged)
		}
	}()
	for i := 0; ctx.Err() == nil; {
		v, _ := f.r.fleet.victim(&i, f.r.mon)
		if v == nil {
			Sleep(ctx, 10*time.Millisecond)
			continue
		}
		at, ok := f.r.armPoint(ctx, Failover, v, arm{Mode: modeStop, Key: f.victimKey})
		if !ok {
			continue
		}
		stopped := poll(ctx, 5*time.Second, func() bool { s, err := v.stopped(); return s || err != nil })
		if s, _ := v.stopped(); stopped && s && !f.known(at) && !rowChange(at.Name) {
			f.v, f.at = v, at
			// Its lease outlives the steps of the failover on the old
			// primary's clock: the others must not take it over there.
			f.stopOthers(ctx, -1)
			return true
		}
		if stopped && f.known(at) {
			below++
		}
		// A victim stopped before a delete or a create is resumed too
		// (rowChange), without a note: the next one likely edits.
		_ = v.signal(sigCont)
		f.r.finish(ctx, v, at, true, Failover)
	}
	return false
}

// rowChange reports whether the before-write point named point is that of
// a write that deletes or creates a row — by the points' convention, a
// name with ".delete." or ".create." — rather than one that changes it.
// The victim is never stopped at one: with plain tokens the taker must be
// granted the victim's very token (its fenced read stamped the row with
// it, and refuses any lower one), with its operation's first lease.
// Stopped before its create, the victim leaves a deleted row: the taker's
// edit would spend that token on a read that finds no row and go on to its
// create with a second lease; and a delete against a delete leaves nothing
// for the second to do.
func rowChange(point string) bool {
	return strings.Contains(point, ".delete.") || strings.Contains(point, ".create.")
}

// known reports whether the lease at holds may be known to the promoted
// standby, or too near to it: its sequence value (a token minted in a
// fence era carries it below fence.EraSize) is at or below what the
// sequence had WAL-logged when the standby was held — the promoted standby
// would hand out tokens above it, the plain tokens would not go back past
// it — or within failoverSlack above that, where the taker's operation in
// flight could be granted it before the taker is parked. An operation
// without a lease has no token to know.
func (f *failoverStep) known(at event) bool {
	return at.Token > 0 && at.Token%fence.EraSize <= f.floor()
}

// floor is the token sequence value a victim's token must be above:
// what the sequence had WAL-logged when the standby was held, and
// failoverSlack.
func (f *failoverStep) floor() int64 { return f.logged + failoverSlack }

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

// takeover makes the interleaving that shows a fence that went back. One
// other client, the taker, runs alone (every other client stays stopped),
// one operation at a time: each is parked at its start (modePark), which
// reports its key, and let go by the coordinator; the operation it was in
// when it was stopped runs on first, and the next ones are sent to the
// stopped client's key (cmdDirect, until one holds at its write). Once the
// taker parks at
// the start of an operation on the stopped client's key, the coordinator
// draws the token sequence on the promoted node up to just below the
// stopped client's token (mint), as other locks' leases would on a busy
// lock service, and lets the operation go, armed to hold at its
// before-write point: it is granted the key — with plain tokens, the very
// token the stopped client holds — and reads. Then the taker writes, and
// is parked before its next operation (cmdStep), so that no later lease of
// its own raises the fence before the stopped client's write has landed:
// the stopped client's write is the next to reach the key whatever the
// scheduler does (or the one before the taker's, when the taker's write is
// a delete). It reports whether the taker wrote, and whether its token was
// at or below the stopped client's: the tokens went back.
func (f *failoverStep) takeover(ctx context.Context) (taken, wentBack bool) {
	m, key := f.r.mon, f.at.Key
	procs := f.r.fleet.all()
	i := slices.IndexFunc(procs, func(p *proc) bool { return p != f.v && !p.exited() })
	if i < 0 {
		f.r.log.note("failover: no other client to take %s over", key)
		return false, false
	}
	taker := procs[i]
	deadline := time.Now().Add(f.r.takeoverBound() + time.Minute) // it reconnects first
	// The direction stays until the taker holds at its write: a directed
	// operation that fails before it (its acquire sent on a connection the
	// killed primary left in its pool) mints nothing on the promoted node,
	// and the next one goes to the key again, armed as it was, instead of
	// elsewhere with the stopped client's token.
	taker.command(command{Cmd: cmdDirect, Key: key, Stay: true})
	defer taker.command(command{Cmd: cmdDirect})
	taker.command(command{Cmd: cmdStep})
	_ = taker.signal(sigCont)
	since, ok := f.parkOnKey(ctx, taker, deadline)
	if !ok {
		return false, false
	}
	f.mint(ctx)
	taker.command(command{Cmd: cmdStep, Arm: &arm{Mode: modeHold, Key: key}})
	var held pointSeen
	if !m.wait(ctx, time.Until(deadline), func() bool {
		for _, p := range m.points {
			if p.client == taker.client && p.ev.Ev == evPoint && p.ev.Mode == modeHold && p.ev.Key == key && p.ev.T > since {
				held = p
				return true
			}
		}
		return false
	}) {
		if ctx.Err() == nil {
			f.r.log.note("failover: client %d reached no write on %s within a minute and %v of the promotion", taker.client, key, f.r.takeoverBound())
		}
		return false, false
	}
	taker.command(command{Cmd: cmdDirect})
	if rowChange(held.ev.Name) {
		// The taker deletes: first, it would leave the stopped client's
		// edit no row to write, whatever its token. The stopped client
		// writes first, and the taker's delete, based on what it read
		// before, lands on its write: with tokens that went back, both
		// land.
		f.resumeVictim(ctx)
	}
	// Its write goes on, and its next operation is parked in the same
	// step of the worker (step): finish clears it once the stopped
	// client's operation has completed.
	taker.command(command{Cmd: cmdStep})
	taken = m.wait(ctx, f.r.params.OpTimeout+10*time.Second, func() bool { return m.completedLocked(held.ev.Op) })
	f.r.log.note("failover: client %d took %s over on the promoted node with token %d (%s); the stopped client %d holds token %d (%s)", held.client, key, held.ev.Token, held.ev.Name, f.v.client, f.at.Token, f.at.Name)
	if held.ev.Token > f.at.Token {
		// Its write raised the fence above the stopped client's, whatever
		// tokens went back before it.
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

// grantsSincePromoted lists the lease events of every client but the
// stopped one since the promotion, in time order: what the taker was granted, or maybe
// granted (a request whose answer never came), on its way to the key.
func (f *failoverStep) grantsSincePromoted() string {
	m := f.r.mon
	m.mu.Lock()
	defer m.mu.Unlock()
	type seen struct {
		client int
		ev     event
	}
	var evs []seen
	for client, es := range m.tenures {
		for _, ev := range es {
			if client != f.v.client && ev.T > f.promoted {
				evs = append(evs, seen{client, ev})
			}
		}
	}
	if len(evs) == 0 {
		return "none"
	}
	slices.SortFunc(evs, func(a, b seen) int { return cmp.Compare(a.ev.T, b.ev.T) })
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = fmt.Sprintf("client %d %s %s token %d at t=%v", e.client, e.ev.Ev, e.ev.Name, e.ev.Token, e.ev.T)
		if e.ev.Uncertain {
			out[i] += " (uncertain)"
		}
	}
	return strings.Join(out, "; ")
}

// parkOnKey lets the taker's operations go one at a time, each parked at
// its start, until one parks on the stopped client's key; it returns when
// that one parked, and false if none did by deadline.
func (f *failoverStep) parkOnKey(ctx context.Context, taker *proc, deadline time.Time) (history.Time, bool) {
	m, key := f.r.mon, f.at.Key
	since := f.promoted
	for {
		var parked event
		if !m.wait(ctx, time.Until(deadline), func() bool {
			var ok bool
			parked, ok = m.pointLocked(taker.client, evPoint, modePark, since)
			return ok
		}) {
			if ctx.Err() == nil {
				f.r.log.note("failover: client %d began no operation on %s within a minute and %v of the promotion", taker.client, key, f.r.takeoverBound())
			}
			return 0, false
		}
		since = parked.T + 1
		if parked.Key == key {
			return since, true
		}
		taker.command(command{Cmd: cmdStep})
	}
}

// mint draws the promoted node's token sequence up to just below the
// stopped client's token (its value below fence.EraSize), when it is below
// that: the taker's next lease is then granted the value the stopped
// client holds, if the sequence went back, and a value above it otherwise.
// A value the sequence has already handed out is never drawn again: setval
// only moves it forward here. It notes, for the foil, a sequence that had
// handed out the stopped client's value already: no lease granted from now
// on can carry it.
func (f *failoverStep) mint(ctx context.Context) {
	if f.at.Token <= 0 {
		return
	}
	want := f.at.Token%fence.EraSize - 1
	var last int64
	if err := f.queryRow(ctx, fmt.Sprintf(sqlMintUpTo, want), &last); err != nil {
		f.r.log.note("failover: drawing the promoted node's tokens up to the stopped client's: %v", err)
		return
	}
	if _, foil := f.r.def.(plainTokenLock); foil && last > want {
		f.r.log.note("failover: the promoted node had handed out %d before the taker began its operation on %s, past %d, the value before the stopped client's token %d: no lease granted from then on carries that token", last, f.at.Key, want, f.at.Token)
	}
}

// resume resumes the stopped client, whose write is now the next to land,
// waits until its operation has completed, and resumes the others.
func (f *failoverStep) resume(ctx context.Context, taken bool) {
	f.resumeVictim(ctx)
	for _, p := range f.r.fleet.all() {
		_ = p.signal(sigCont)
	}
	f.v.command(command{Cmd: cmdClear})
	f.r.finish(ctx, f.v, f.at, taken, Failover)
}

// resumeVictim resumes the stopped client, once, and waits until its
// operation has completed. Its next operation is parked (cmdStep, read as
// it resumes) until resume clears it: when it writes before the taker, no
// lease of its own may raise the fence above the taker's write.
func (f *failoverStep) resumeVictim(ctx context.Context) {
	if f.resumed {
		return
	}
	f.resumed = true
	f.v.command(command{Cmd: cmdStep})
	_ = f.v.signal(sigCont)
	f.r.log.span(f.v.client, report.SpanPause, f.at.T, history.Now(), fmt.Sprintf("SIGSTOP on %s across the failover", f.at.Key))
	if f.at.Op != "" {
		f.r.mon.wait(ctx, f.r.params.OpTimeout+10*time.Second, func() bool { return f.r.mon.completedLocked(f.at.Op) || f.v.exited() })
	}
}

// stopOthers stops every client but the victim and the one numbered keep
// with SIGSTOP, and waits until each is seen stopped.
func (f *failoverStep) stopOthers(ctx context.Context, keep int) {
	for _, p := range f.r.fleet.all() {
		if p != f.v && p.client != keep && !p.exited() {
			_ = p.signal(syscall.SIGSTOP)
			poll(ctx, 5*time.Second, func() bool { s, err := p.stopped(); return s || err != nil })
		}
	}
}

// contOthers resumes every client but the victim.
func (f *failoverStep) contOthers() {
	for _, p := range f.r.fleet.all() {
		if p != f.v {
			_ = p.signal(sigCont)
		}
	}
}

// pastLocked reports whether the run has been granted, since t, a lease
// whose token's sequence value (below fence.EraSize) is above logged, or,
// when it has seen no lease at all (an approach without a lock), whether
// failoverMints operations have completed since t.
func (m *monitor) pastLocked(t history.Time, logged int64) bool {
	any := false
	for _, ls := range m.leases {
		for _, l := range ls {
			any = true
			if l.t > t && l.token%fence.EraSize > logged {
				return true
			}
		}
	}
	if any {
		return false
	}
	ops := 0
	for _, os := range m.ok {
		for _, o := range os {
			if o.call > t {
				ops++
			}
		}
	}
	return ops >= failoverMints
}
