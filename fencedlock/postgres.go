package fencedlock

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the schema of the PostgreSQL backend, for migrate.Up
// and migrate.Print (or `lockfree migrate`): the fence functions (package
// "fence", shared with every lockfree package that mints fences, and
// applied once however many of them an application migrates), then the
// lock table.
func Migrations() []migrate.Migration {
	return append(fence.Migrations(), migrate.FromDir("fencedlock", migrationFiles, "migrations")...)
}

// DB is what the PostgreSQL backend and Fence need from a connection:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it, so every operation can
// run inside the caller's own transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// PostgresConfig configures a Postgres store. A nil *PostgresConfig means
// the defaults.
type PostgresConfig struct {
	// Tables says where the lock table lives. Defaults to the
	// connection's search_path and the prefix "lockfree_".
	Tables migrate.Names
	// Notify sends a NOTIFY on every release, and lets a store whose DB is
	// a *pgxpool.Pool wake its own waiters (AcquireWait, Locker.Do) at
	// once: while at least one waits, the store holds one pooled connection
	// LISTENing, and gives it back when none does. NOTIFY serialises
	// committing transactions on a server-wide lock, so it costs
	// throughput. Defaults to false.
	Notify bool
}

func (c *PostgresConfig) withDefaults() PostgresConfig {
	if c == nil {
		return PostgresConfig{}
	}
	return *c
}

func (c PostgresConfig) validate() error {
	if err := c.Tables.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// The statements of the Postgres store, rendered once per store.
//
// Acquire sends at most two statements, in this order:
//
//  1. sqlAcquire takes the name's row if it is free or expired, minting a
//     new token. It returns no row when the row is held, or when the name
//     has none (a fresh name, or a purged row).
//  2. sqlAcquireInsert, only then, inserts the name's row with a new token
//     if it has none, or reports the holder.
//
// Both mint with fence_mint, in the fence era of the server they run on
// (see ErrFenceEra), so that a token minted after a failover exceeds every
// token minted before it. sqlAcquire mints for a row it has found: a
// competing tenure of the same name must lock that row, and the UPDATE
// re-evaluates (and re-mints) after waiting for it. A refusal writes
// nothing: an UPDATE whose condition fails neither locks nor writes the
// row, and an INSERT that finds the row inserts nothing. A free row, the
// common case, costs the bare UPDATE; a held one a second round trip.
//
// sqlAcquireInsert mints with its SELECT's fence_mint(), evaluated before
// the row exists, so a Purge that deleted the name's row between that mint
// and the insert could let a later tenure carry a smaller token than a
// purged earlier one. So it first takes a shared transaction-level
// advisory lock (sqlPurgeLock takes it exclusively): a Purge waits for
// every mint in flight, and every mint after a Purge is greater than the
// tokens of the rows it deleted. Its guard (WHERE NOT EXISTS) keeps it from
// minting for a name that has a row (the values of an INSERT are computed
// before its conflict is found), and ON CONFLICT DO NOTHING from locking
// or writing one that a concurrent insert of the name created.
//
// When both find no row to take or report (the row changed hands while
// they ran: released, taken, purged), Acquire runs them again, a few times
// (acquireRetrying).
const (
	// purgeFence is the advisory lock that orders mints and purges of one
	// lock table.
	purgeFence = `hashtext('lockfree.fencedlock.purge'), {{regclass locks}}::regclass::oid::int`
	// purgeFenceFrom is the source of the insert's single row: it takes
	// purgeFence shared before the row's token is minted.
	purgeFenceFrom = `FROM (SELECT pg_advisory_xact_lock_shared(` + purgeFence + `)) AS purge_fence`
	// acquireUpdate takes an expired row and mints its token.
	acquireUpdate = `UPDATE {{locks}} SET holder = $2, token = {{fence_mint}}({{regclass lock_fences}}),
			acquired_at = clock_timestamp(), expires_at = clock_timestamp() + $3 * interval '1 microsecond'` + clearValue + `
		WHERE name = $1 AND expires_at <= clock_timestamp()
		RETURNING token, expires_at`
	// acquireInsert inserts a fresh row and mints its token.
	acquireInsert = `INSERT INTO {{locks}} (name, holder, token, acquired_at, expires_at, value)
		SELECT $1, $2, {{fence_mint}}({{regclass lock_fences}}), clock_timestamp(), clock_timestamp() + $3 * interval '1 microsecond', ` + valueArg + `
		` + purgeFenceFrom + `
		WHERE NOT EXISTS (SELECT FROM {{locks}} WHERE name = $1)
		ON CONFLICT (name) DO NOTHING
		RETURNING token, expires_at`
	// clearValue sets the new tenure's value: none in Acquire's
	// statements, the bound $4 in AcquireValue's (valueArg). A fresh row
	// gets it from its INSERT.
	clearValue = `, value = ` + valueArg
	// heldAnswer reports the holder when the statement took (the CTE)
	// took nothing.
	heldAnswer = `
	SELECT true, $2::text, token, expires_at FROM took
	UNION ALL
	SELECT false, holder, token, expires_at FROM {{locks}}
	WHERE name = $1 AND expires_at > clock_timestamp() AND NOT EXISTS (SELECT FROM took)`
	sqlAcquire       = acquireUpdate
	sqlAcquireInsert = `WITH took AS (` + acquireInsert + `)` + heldAnswer
	sqlHolder        = `SELECT holder, token, expires_at, value FROM {{locks}}
		WHERE name = $1 AND expires_at > clock_timestamp()`
	// sqlSetValue changes the value of the current tenure only.
	sqlSetValue = `UPDATE {{locks}} SET value = $4
		WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > clock_timestamp()
		RETURNING expires_at`
	sqlSetValueNotify = `WITH set AS (` + sqlSetValue + `)
		SELECT expires_at, pg_notify($5, $1) FROM set`
	sqlNotifyChange = `SELECT pg_notify($1, $2)`
	// sqlList reads the clock once, and lists the unexpired rows against
	// it, in byte order (COLLATE "C", as Go compares strings), after $2 and
	// starting with $1, one more than the page so that the last page says
	// so. It scans the lock table, whose only index is on name in the
	// database's collation: an operator's query, not a request's.
	sqlList = `SELECT c.now, l.name, l.holder, l.token, l.value, l.acquired_at, l.expires_at
		FROM (SELECT clock_timestamp() AS now) c
		LEFT JOIN LATERAL (
			SELECT name, holder, token, value, acquired_at, expires_at FROM {{locks}}
			WHERE expires_at > c.now AND starts_with(name, $1) AND name COLLATE "C" > $2
			ORDER BY name COLLATE "C" LIMIT $3
		) l ON true
		ORDER BY l.name COLLATE "C"`
	sqlRenew = `UPDATE {{locks}} SET expires_at = clock_timestamp() + $4 * interval '1 microsecond'
		WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > clock_timestamp()
		RETURNING expires_at`
	sqlRelease = `UPDATE {{locks}} SET expires_at = clock_timestamp()
		WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > clock_timestamp()`
	sqlReleaseNotify = `WITH released AS (` + sqlRelease + ` RETURNING name)
		SELECT pg_notify($4, name) FROM released`
	sqlVerify = `SELECT token FROM {{locks}}
		WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > clock_timestamp() FOR SHARE`
	sqlCurrent = `SELECT token FROM {{locks}} WHERE name = $1`
	// sqlPurgeLock runs before sqlPurge in the same transaction. Without an
	// index on expires_at (it would make every acquire and release write
	// index entries), sqlPurge scans the table until it has limit rows.
	sqlPurgeLock = `SELECT pg_advisory_xact_lock(` + purgeFence + `)`
	sqlPurge     = `DELETE FROM {{locks}} WHERE name IN (
		SELECT name FROM {{locks}} WHERE expires_at < clock_timestamp() - $1 * interval '1 microsecond'
		LIMIT $2 FOR UPDATE SKIP LOCKED)`
)

// Unsafe variants for the mutant sites (failpoint.Mutant): dead code in
// default builds. They keep the parameters of the statements they replace.
const (
	mutantRenewTenure = `UPDATE {{locks}} SET expires_at = clock_timestamp() + $4 * interval '1 microsecond'
		WHERE name = $1 AND ($2::text, $3::bigint) IS NOT NULL AND expires_at > clock_timestamp()
		RETURNING expires_at`
	mutantRenewExpired = `UPDATE {{locks}} SET expires_at = clock_timestamp() + $4 * interval '1 microsecond'
		WHERE name = $1 AND holder = $2 AND token = $3
		RETURNING expires_at`
	mutantRelease = `UPDATE {{locks}} SET expires_at = clock_timestamp()
		WHERE name = $1 AND ($2::text, $3::bigint) IS NOT NULL AND expires_at > clock_timestamp()`
	mutantSetValue = `UPDATE {{locks}} SET value = $4
		WHERE name = $1 AND ($2::text, $3::bigint) IS NOT NULL AND expires_at > clock_timestamp()
		RETURNING expires_at`
)

// valueArg stands for the new tenure's value in the acquire templates:
// renderStatements makes it NULL in Acquire's statements and the bound $4
// in AcquireValue's, so that a new tenure never keeps another's value.
const valueArg = "{value}"

type pgStatements struct {
	acquire, acquireInsert, holder, renew, release, releaseNotify, verify, current, purgeLock, purge string
	setValue, setValueNotify, notifyChange, list                                                     string
	// valued are the acquire statements of AcquireValue: the value is $4.
	valued acquireStatements
}

// renderAcquire renders an acquire template with the new tenure's value:
// NULL, or $4 when valued.
func renderAcquire(sql string, n migrate.Names, valued bool) string {
	v := "NULL::bytea"
	if valued {
		v = "$4::bytea"
	}
	return migrate.Render(strings.ReplaceAll(sql, valueArg, v), n)
}

func renderStatements(n migrate.Names) pgStatements {
	r := func(s string) string { return migrate.Render(s, n) }
	a := func(s string) string { return renderAcquire(s, n, false) }
	v := func(s string) string { return renderAcquire(s, n, true) }
	return pgStatements{
		acquire: a(sqlAcquire), acquireInsert: a(sqlAcquireInsert), holder: r(sqlHolder), renew: r(sqlRenew),
		release: r(sqlRelease), releaseNotify: r(sqlReleaseNotify), verify: r(sqlVerify),
		current: r(sqlCurrent), purgeLock: r(sqlPurgeLock), purge: r(sqlPurge),
		setValue: r(sqlSetValue), setValueNotify: r(sqlSetValueNotify), notifyChange: sqlNotifyChange, list: r(sqlList),
		valued: acquireStatements{take: v(sqlAcquire), insert: v(sqlAcquireInsert), valued: true},
	}
}

// Postgres is the lock service in PostgreSQL. Expiry is decided by the
// database's clock (clock_timestamp()), never the client's. It is safe for
// concurrent use.
type Postgres struct {
	db      DB
	tables  migrate.Names
	notify  bool
	channel string // the NOTIFY channel of releases, bound as an argument
	// changeChannel is the NOTIFY channel of grants by AcquireValue and of
	// SetValue, bound as an argument.
	changeChannel string
	sql           pgStatements
	listener      *listener // nil unless Notify and db is a pool
}

// NewPostgres returns a store on db; the schema must have been migrated
// (Migrations). A nil cfg means the defaults. A nil db or invalid Tables give
// an error matching ErrInvalid (and migrate.ErrInvalidName for Tables). It
// does no I/O.
func NewPostgres(db DB, cfg *PostgresConfig) (*Postgres, error) {
	c := cfg.withDefaults()
	if db == nil {
		return nil, fmt.Errorf("%w: nil DB", ErrInvalid)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	p := &Postgres{db: db, tables: c.Tables, notify: c.Notify, channel: releaseChannel(c.Tables), changeChannel: changeChannel(c.Tables),
		sql: renderStatements(c.Tables)}
	if pool, ok := db.(*pgxpool.Pool); ok && c.Notify {
		p.listener = &listener{pool: pool, released: p.channel, changed: p.changeChannel}
	}
	return p, nil
}

// releaseChannel is the NOTIFY channel of releases of the lock table named
// by tables, and changeChannel that of its grants by AcquireValue and of
// SetValue.
func releaseChannel(tables migrate.Names) string { return tables.Raw("lock_released") }

func changeChannel(tables migrate.Names) string { return tables.Raw("lock_changed") }

// WithDB returns a copy of the store whose statements run on db — typically
// the caller's transaction — with the same configuration, and the same
// waiters.
func (p *Postgres) WithDB(db DB) *Postgres {
	c := *p
	c.db = db
	return &c
}

// Released implements Wakeups: the channel is closed at the next release of
// name by a store with Notify. Only a store created with Notify on a
// *pgxpool.Pool listens; on any other the channel closes never, and waiters
// poll.
func (p *Postgres) Released(name string) (<-chan struct{}, func()) {
	if p.listener == nil {
		return nil, func() {}
	}
	return p.listener.Released(name)
}

// Changed implements Watcher: the channel is closed at the next release,
// grant by AcquireValue or SetValue of name by a store with Notify. Only a
// store created with Notify on a *pgxpool.Pool listens; on any other the
// channel is nil, and watchers poll.
func (p *Postgres) Changed(name string) (<-chan struct{}, func()) {
	if p.listener == nil {
		return nil, func() {}
	}
	return p.listener.Changed(name)
}

// Acquire implements Store. It is one statement when the name's row is free
// or expired (sqlAcquire), and two when it is held or the name has none
// (then sqlAcquireInsert).
func (p *Postgres) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	if err := validAcquire(name, holder, ttl); err != nil {
		return Lease{}, err
	}
	return p.acquireRetrying(ctx, grant{name: name, holder: holder, ttl: ttl})
}

// AcquireValue implements ValueStore: Acquire's statements, with the value
// bound in the statement that grants the lease. With Notify, a grant is
// followed by a notice to watchers (Changed), in a statement of its own.
func (p *Postgres) AcquireValue(ctx context.Context, name, holder string, ttl time.Duration, value string) (Lease, error) {
	if err := validAcquire(name, holder, ttl); err != nil {
		return Lease{}, err
	}
	if err := ValidValue(value); err != nil {
		return Lease{}, err
	}
	l, err := p.acquireRetrying(ctx, grant{name: name, holder: holder, ttl: ttl, value: value, valued: true})
	if err == nil && p.notify {
		// A notice is a hint: watchers poll as well. Its failure does not
		// undo the grant.
		_, _ = p.db.Exec(ctx, p.sql.notifyChange, p.changeChannel, name)
	}
	return l, err
}

// grant is what one acquire asks for: the value is bound as $4 when valued.
type grant struct {
	name, holder string
	ttl          time.Duration
	value        string
	valued       bool
}

// args are the statement's arguments.
func (g grant) args() []any {
	if !g.valued {
		return []any{g.name, g.holder, g.ttl.Microseconds()}
	}
	var v []byte // "" is NULL: no value
	if g.value != "" {
		v = []byte(g.value)
	}
	return []any{g.name, g.holder, g.ttl.Microseconds(), v}
}

// lease is the lease the grant gives, before its token and expiry are read.
func (g grant) lease(sent time.Time) Lease {
	return Lease{Name: g.name, Holder: g.holder, TTL: g.ttl, Value: g.value, sent: sent}
}

// acquireRetrying runs acquire attempts: no row at all means the lock
// changed hands while the statement ran (released, purged, taken), so it
// tries again a few times before reporting contention.
func (p *Postgres) acquireRetrying(ctx context.Context, g grant) (Lease, error) {
	for attempt := 0; ; attempt++ {
		l, err := p.acquire(ctx, g)
		if !errors.Is(err, pgx.ErrNoRows) {
			return l, err
		}
		if attempt == 2 {
			cur, _, err := p.Holder(ctx, g.name)
			if err != nil {
				return Lease{}, err
			}
			return Lease{}, &HeldError{Name: g.name, Holder: cur.Holder, Token: cur.Token}
		}
	}
}

// acquireStatements are the statements of one acquire, sqlAcquire (take)
// and sqlAcquireInsert (insert), rendered (with the value bound as $4 when
// valued), with a mutant's change when one is on.
type acquireStatements struct {
	take, insert string
	valued       bool
}

func (p *Postgres) acquireStatements(valued bool) acquireStatements {
	s := acquireStatements{take: p.sql.acquire, insert: p.sql.acquireInsert}
	if valued {
		s = p.sql.valued
	}
	render := func(sql string) string { return renderAcquire(sql, p.tables, valued) }
	if failpoint.Mutant("fencedlock.acquire.expired") {
		// The update without its expiry condition.
		s.take = render(strings.Replace(sqlAcquire, "WHERE name = $1 AND expires_at <= clock_timestamp()", "WHERE name = $1", 1))
	}
	if failpoint.Mutant("fencedlock.acquire.purge-fence") {
		// The insert mints without waiting for a purge in flight.
		s.insert = render(strings.Replace(sqlAcquireInsert, purgeFenceFrom, "", 1))
	}
	if !valued && failpoint.Mutant("fencedlock.acquire.clear-value") {
		// A taken row keeps the value of the tenure before.
		s.take = render(strings.Replace(sqlAcquire, clearValue, "", 1))
	}
	return s
}

// acquire runs one attempt: sqlAcquire, then sqlAcquireInsert when it took
// nothing. It returns pgx.ErrNoRows when neither found a row to take or
// report.
func (p *Postgres) acquire(ctx context.Context, g grant) (Lease, error) {
	s := p.acquireStatements(g.valued)
	l := g.lease(time.Now())
	err := p.db.QueryRow(ctx, s.take, g.args()...).Scan(&l.Token, &l.Expires)
	switch {
	case err == nil:
		return l, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return Lease{}, fmt.Errorf("fencedlock: acquire %s: %w", short.Quote(g.name), fence.Check(err, p.tables))
	}
	return p.attempt(ctx, s.insert, g)
}

// attempt runs sqlAcquireInsert: the lease it granted, a *HeldError with
// the holder it reported, or pgx.ErrNoRows.
func (p *Postgres) attempt(ctx context.Context, acquire string, g grant) (Lease, error) {
	l := g.lease(time.Now())
	var acquired bool
	var cur string
	err := p.db.QueryRow(ctx, acquire, g.args()...).Scan(&acquired, &cur, &l.Token, &l.Expires)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Lease{}, err
	case err != nil:
		return Lease{}, fmt.Errorf("fencedlock: acquire %s: %w", short.Quote(g.name), fence.Check(err, p.tables))
	case !acquired:
		return Lease{}, &HeldError{Name: g.name, Holder: cur, Token: l.Token}
	}
	return l, nil
}

// Renew implements Store.
func (p *Postgres) Renew(ctx context.Context, l Lease) (Lease, error) {
	if err := validLease(l); err != nil {
		return Lease{}, err
	}
	renew := p.sql.renew
	if failpoint.Mutant("fencedlock.renew.tenure") {
		renew = migrate.Render(mutantRenewTenure, p.tables)
	}
	if failpoint.Mutant("fencedlock.renew.expired") {
		renew = migrate.Render(mutantRenewExpired, p.tables)
	}
	sent := time.Now()
	err := p.db.QueryRow(ctx, renew, l.Name, l.Holder, l.Token, l.TTL.Microseconds()).Scan(&l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, fmt.Errorf("%w: renew %s token %d", ErrNotHeld, short.Quote(l.Name), l.Token)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("fencedlock: renew %s: %w", short.Quote(l.Name), err)
	}
	l.sent = sent
	return l, nil
}

// Release implements Store. With Notify set, waiters are woken in the same
// statement.
func (p *Postgres) Release(ctx context.Context, l Lease) error {
	if err := validTenure(l); err != nil {
		return err
	}
	release := p.sql.release
	if failpoint.Mutant("fencedlock.release.tenure") {
		release = migrate.Render(mutantRelease, p.tables)
	}
	n, err := p.release(ctx, release, l)
	if err != nil {
		return fmt.Errorf("fencedlock: release %s: %w", short.Quote(l.Name), err)
	}
	if n == 0 {
		return fmt.Errorf("%w: release %s token %d", ErrNotHeld, short.Quote(l.Name), l.Token)
	}
	return nil
}

// release runs the release statement, wrapped in a NOTIFY when the store
// notifies, and returns how many rows it released.
func (p *Postgres) release(ctx context.Context, release string, l Lease) (int64, error) {
	if !p.notify {
		tag, err := p.db.Exec(ctx, release, l.Name, l.Holder, l.Token)
		return tag.RowsAffected(), err
	}
	if release != p.sql.release { // a mutant's
		release = `WITH released AS (` + release + ` RETURNING name) SELECT pg_notify($4, name) FROM released`
	} else {
		release = p.sql.releaseNotify
	}
	rows, err := p.db.Query(ctx, release, l.Name, l.Holder, l.Token, p.channel)
	if err != nil {
		return 0, err
	}
	var n int64
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

// Holder implements Store.
func (p *Postgres) Holder(ctx context.Context, name string) (Lease, bool, error) {
	if err := validName("lock name", name); err != nil {
		return Lease{}, false, err
	}
	l := Lease{Name: name}
	var value []byte
	err := p.db.QueryRow(ctx, p.sql.holder, name).Scan(&l.Holder, &l.Token, &l.Expires, &value)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("fencedlock: holder %s: %w", short.Quote(name), err)
	}
	l.Value = string(value)
	return l, true, nil
}

// SetValue implements ValueStore. It is one statement; with Notify, the
// same statement notifies watchers (Changed).
func (p *Postgres) SetValue(ctx context.Context, l Lease, value string) (Lease, error) {
	if err := validLease(l); err != nil {
		return Lease{}, err
	}
	if err := ValidValue(value); err != nil {
		return Lease{}, err
	}
	var v []byte // "" is NULL: no value
	if value != "" {
		v = []byte(value)
	}
	stmt, args := p.sql.setValue, []any{l.Name, l.Holder, l.Token, v}
	var expires time.Time
	dests := []any{&expires}
	if p.notify {
		stmt, args, dests = p.sql.setValueNotify, append(args, p.changeChannel), append(dests, nil)
	}
	if failpoint.Mutant("fencedlock.value.tenure") {
		stmt = migrate.Render(mutantSetValue, p.tables)
		if p.notify {
			stmt = `WITH set AS (` + stmt + `) SELECT expires_at, pg_notify($5, $1) FROM set`
		}
	}
	err := p.db.QueryRow(ctx, stmt, args...).Scan(dests...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, fmt.Errorf("%w: set value of %s token %d", ErrNotHeld, short.Quote(l.Name), l.Token)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("fencedlock: set value of %s: %w", short.Quote(l.Name), err)
	}
	l.Value = value
	return l, nil
}

// AcquireAll implements MultiStore. It runs in a transaction of its own (a
// savepoint in the caller's, with WithDB on a pgx.Tx): one acquire
// statement per name, in sorted order, so that two of them on overlapping
// names lock the rows in the same order and cannot deadlock; the first
// name held rolls it back. So it needs a DB that can Begin (a pool, a
// connection, a transaction), or it is ErrInvalid. An error from the commit
// leaves the outcome unknown: leases granted then expire after ttl.
func (p *Postgres) AcquireAll(ctx context.Context, names []string, holder string, ttl time.Duration) ([]Lease, error) {
	order, err := validAcquireAll(names, holder, ttl)
	if err != nil {
		return nil, err
	}
	db, ok := p.db.(interface {
		Begin(context.Context) (pgx.Tx, error)
	})
	if !ok {
		return nil, fmt.Errorf("%w: AcquireAll needs a DB that can Begin a transaction", ErrInvalid)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("fencedlock: acquire all: %w", err)
	}
	defer func() {
		// After a commit this does nothing; a lost connection rolls back on
		// the server anyway, so the wait is bounded.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	in := p.WithDB(tx)
	leases := make([]Lease, len(names))
	for _, i := range order {
		if leases[i], err = in.Acquire(ctx, names[i], holder, ttl); err != nil {
			if errors.Is(err, ErrHeld) && failpoint.Mutant("fencedlock.acquireall.atomic") {
				_ = tx.Commit(ctx) // keeps the names taken before: not all or nothing
			}
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("fencedlock: acquire all: commit: %w", err)
	}
	return leases, nil
}

// List implements Lister. It is one statement, which scans the lock table:
// it is for operators, not for every request.
func (p *Postgres) List(ctx context.Context, q ListQuery) (Page, error) {
	q = q.withDefaults()
	if err := q.validate(); err != nil {
		return Page{}, err
	}
	rows, err := p.db.Query(ctx, p.sql.list, q.Prefix, q.After, q.Limit+1)
	if err != nil {
		return Page{}, fmt.Errorf("fencedlock: list: %w", err)
	}
	defer rows.Close()
	var page Page
	for rows.Next() {
		var (
			name, holder  *string
			token         *int64
			value         []byte
			since, expire *time.Time
		)
		if err := rows.Scan(&page.Now, &name, &holder, &token, &value, &since, &expire); err != nil {
			return Page{}, fmt.Errorf("fencedlock: list: %w", err)
		}
		if name == nil {
			continue // no lock: the clock alone
		}
		page.Locks = append(page.Locks, Holding{
			Lease: Lease{Name: *name, Holder: *holder, Token: *token, Expires: *expire, Value: string(value)}, Since: *since})
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("fencedlock: list: %w", err)
	}
	if len(page.Locks) > q.Limit {
		page.Locks = page.Locks[:q.Limit]
		page.Next = page.Locks[q.Limit-1].Name
	}
	return page, nil
}

// Verify proves, inside the caller's transaction tx, that lease is still the
// current unexpired tenure, and keeps it so until tx ends: it share-locks the
// lock's row, so a takeover (which must update that row) waits for tx to
// commit or roll back. Use it when the protected resource lives in the same
// database as the lock: call Verify first in the transaction that writes the
// resource. It returns a *FencedError when a newer tenure exists and
// ErrNotHeld when the lease expired or was released.
//
// A renewal of the same lease also waits for tx, so keep such transactions
// shorter than the renewal interval.
func (p *Postgres) Verify(ctx context.Context, tx DB, lease Lease) error {
	if err := validTenure(lease); err != nil {
		return err
	}
	if failpoint.Mutant("fencedlock.verify.check") {
		return nil
	}
	var tok int64
	err := tx.QueryRow(ctx, p.sql.verify, lease.Name, lease.Holder, lease.Token).Scan(&tok)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("fencedlock: verify %s: %w", short.Quote(lease.Name), err)
	}
	if err := tx.QueryRow(ctx, p.sql.current, lease.Name).Scan(&tok); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("fencedlock: verify %s: %w", short.Quote(lease.Name), err)
	}
	if tok > lease.Token {
		return &FencedError{Presented: lease.Token, Required: tok}
	}
	return fmt.Errorf("%w: verify %s token %d", ErrNotHeld, short.Quote(lease.Name), lease.Token)
}

// Purge deletes up to limit lock rows that expired more than olderThan ago
// and returns how many it deleted. Tokens stay monotonic: they come from a
// sequence, not from the rows, and a Purge waits for the acquires minting at
// that moment. Call it in a loop until it returns less than limit; rows being
// acquired at the same moment are skipped, not waited for. It scans the table
// (there is no index on the expiry, so that acquires and releases stay cheap):
// run it now and then (hourly, say), not on every request.
func (p *Postgres) Purge(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	if olderThan < 0 || limit <= 0 {
		return 0, fmt.Errorf("%w: purge olderThan %v limit %d", ErrInvalid, olderThan, limit)
	}
	// One batch is one transaction: the lock is held until the rows are gone.
	var b pgx.Batch
	b.Queue(p.sql.purgeLock)
	b.Queue(p.sql.purge, olderThan.Microseconds(), limit)
	res := p.db.SendBatch(ctx, &b)
	_, err := res.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = res.Exec()
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("fencedlock: purge: %w", err)
	}
	return tag.RowsAffected(), nil
}
