package partition

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
// membership and ownership tables.
func Migrations() []migrate.Migration {
	return append(fence.Migrations(), migrate.FromDir("partition", migrationFiles, "migrations")...)
}

// DB is what the PostgreSQL backend needs from a connection: *pgxpool.Pool,
// *pgx.Conn and pgx.Tx all satisfy it, so every operation can run inside the
// caller's own transaction (WithDB). No operation opens a transaction of its
// own: Claim sends its statements as one batch, which PostgreSQL runs as one
// transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// PostgresConfig configures a Postgres store. A nil *PostgresConfig means
// the defaults.
type PostgresConfig struct {
	// Tables says where the tables live. Defaults to the connection's
	// search_path and the prefix "lockfree_".
	Tables migrate.Names
	// LockTimeout bounds how long a claim waits for a partition row that a
	// fenced write (Verify, Condition) of the previous owner holds; the
	// claim then fails and is retried at the member's next step. At least
	// 1ms. Defaults to 1s.
	LockTimeout time.Duration
}

func (c *PostgresConfig) withDefaults() PostgresConfig {
	var d PostgresConfig
	if c != nil {
		d = *c
	}
	if d.LockTimeout == 0 {
		d.LockTimeout = time.Second
	}
	return d
}

func (c PostgresConfig) validate() error {
	if err := c.Tables.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if c.LockTimeout < time.Millisecond {
		return fmt.Errorf("%w: lock timeout %v below 1ms", ErrInvalid, c.LockTimeout)
	}
	return nil
}

// The statements of the Postgres store, rendered once per store.
//
// A claim is one batch, which PostgreSQL runs as one transaction: it sets the
// lock timeout, creates the missing ownership rows, locks the rows in
// partition order, then claims them with a second statement. Locking first
// matters: the claim's snapshot is taken after the locks were granted, so it
// sees every membership change committed before — a just-joined owner is not
// taken for dead. The last statement says whether the claimant's lease is
// live, for a claim that took nothing.
//
// A heartbeat judges its lease live when it runs and makes that visible when
// it commits, which a descheduled backend can do a lease later. So a claim
// does not read an owner's lease: it updates the row of each lapsed owner
// (sqlClaim's lapsed). A heartbeat in flight on that row is waited for, and
// its extension seen; one that comes after finds the row changed, judges
// the lease again and finds it expired. Either way the claim and the
// heartbeat agree on whether the lease lapsed.
//
// Incarnations (fence_mint) and epochs (fence_next) are minted in the fence
// era of the server the statement runs on (see ErrFenceEra), so that those
// minted after a failover exceed every one minted before it.
const (
	sqlJoin = `INSERT INTO {{partition_members}} AS m (name, addr, ring, incarnation, leaving, joined_at, expires_at)
		VALUES ($1, $2, $3, {{fence_mint}}({{regclass partition_incarnation_fences}}), false, clock_timestamp(),
		        clock_timestamp() + $4 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET addr = excluded.addr, ring = excluded.ring, incarnation = excluded.incarnation,
		    leaving = false, joined_at = excluded.joined_at, expires_at = excluded.expires_at
		WHERE m.expires_at <= clock_timestamp()
		RETURNING incarnation`
	sqlHeartbeat = `UPDATE {{partition_members}} SET expires_at = clock_timestamp() + $3 * interval '1 microsecond'
		WHERE name = $1 AND incarnation = $2 AND expires_at > clock_timestamp()`
	sqlLeaving = `UPDATE {{partition_members}} SET leaving = true
		WHERE name = $1 AND incarnation = $2 AND expires_at > clock_timestamp()`
	sqlLeave = `DELETE FROM {{partition_members}} WHERE name = $1 AND incarnation = $2`
	sqlLive  = `SELECT name, addr, ring, incarnation, leaving FROM {{partition_members}}
		WHERE expires_at > clock_timestamp() ORDER BY name COLLATE "C"`
	sqlOwners      = `SELECT partition, owner, epoch FROM {{partition_owners}} WHERE partition < $1`
	sqlLockTimeout = `SELECT set_config('lock_timeout', $1, true)`
	sqlEnsure      = `INSERT INTO {{partition_owners}} (partition, owner, epoch, changed_at)
		SELECT p, '', 0, clock_timestamp() FROM unnest($1::int[]) AS p ORDER BY p
		ON CONFLICT (partition) DO NOTHING`
	sqlLock = `SELECT partition FROM {{partition_owners}} WHERE partition = ANY($1) ORDER BY partition FOR UPDATE`
	// sqlClaim first marks, by updating their rows, the members owning the
	// partitions whose leases had lapsed at the transaction's start
	// (lapsed); a heartbeat in flight on such a row is waited for, and one
	// that comes after finds the row changed and judges the lease again,
	// as expired. Then it takes the partitions that are free, its own, or
	// owned by a lapsed member or one that left.
	sqlClaim = `WITH lapsed AS (
		  UPDATE {{partition_members}} AS m SET expires_at = m.expires_at
		  WHERE m.name IN (SELECT o.owner FROM {{partition_owners}} o WHERE o.partition = ANY($1))
		    AND m.name <> $2 AND m.expires_at <= now()
		  RETURNING m.name)
		` + claimTake + `
		  AND (o.owner = '' OR o.owner = $2 OR o.owner IN (SELECT name FROM lapsed)
		       OR NOT EXISTS (SELECT 1 FROM {{partition_members}} m WHERE m.name = o.owner))
		` + claimReturning
	// claimTake and claimReturning are what every claim statement shares
	// (sqlClaim and its mutants): the partitions asked for, given to a
	// claimant whose lease is live, with their new epochs.
	claimTake = `UPDATE {{partition_owners}} AS o SET owner = $2, epoch = {{fence_next}}(o.epoch), changed_at = clock_timestamp()
		WHERE o.partition = ANY($1)
		  AND EXISTS (SELECT 1 FROM {{partition_members}} me
		              WHERE me.name = $2 AND me.incarnation = $3 AND me.expires_at > clock_timestamp())`
	claimReturning = `RETURNING o.partition, o.epoch`
	sqlAlive       = `SELECT EXISTS (SELECT FROM {{partition_members}}
		WHERE name = $1 AND incarnation = $2 AND expires_at > clock_timestamp())`
	sqlRelease = `UPDATE {{partition_owners}} AS o SET owner = '', changed_at = clock_timestamp()
		FROM unnest($1::int[], $2::bigint[]) AS r(partition, epoch)
		WHERE o.partition = r.partition AND o.epoch = r.epoch AND o.owner = $3
		RETURNING o.partition`
	sqlCurrent = `SELECT owner, epoch FROM {{partition_owners}} WHERE partition = $1`
	sqlVerify  = `SELECT epoch FROM {{partition_owners}}
		WHERE partition = $1 AND owner = $2 AND epoch = $3 FOR SHARE`
	// sqlCondition is Condition's text; the %d are the numbers of its
	// three parameters.
	sqlCondition = `EXISTS (SELECT FROM {{partition_owners}} WHERE partition = $%d AND owner = $%d AND epoch = $%d FOR SHARE)`
)

// Unsafe variants for the mutant sites (failpoint.Mutant): dead code in
// default builds. They keep the parameters of the statements they replace.
const (
	mutantJoin = `INSERT INTO {{partition_members}} AS m (name, addr, ring, incarnation, leaving, joined_at, expires_at)
		VALUES ($1, $2, $3, {{fence_mint}}({{regclass partition_incarnation_fences}}), false, clock_timestamp(),
		        clock_timestamp() + $4 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET addr = excluded.addr, ring = excluded.ring, incarnation = excluded.incarnation,
		    leaving = false, joined_at = excluded.joined_at, expires_at = excluded.expires_at
		RETURNING incarnation`
	mutantHeartbeat = `UPDATE {{partition_members}} SET expires_at = clock_timestamp() + $3 * interval '1 microsecond'
		WHERE name = $1 AND incarnation = $2`
	mutantClaim = claimTake + `
		` + claimReturning
	// mutantClaimRead judges the owner's lease by reading it: a heartbeat
	// that judged the lease live, committed after this snapshot, goes on
	// extending a lease the claim took for lapsed.
	mutantClaimRead = claimTake + `
		  AND (o.owner = '' OR o.owner = $2 OR NOT EXISTS (
		       SELECT 1 FROM {{partition_members}} m WHERE m.name = o.owner AND m.expires_at > now()))
		` + claimReturning
	mutantRelease = `UPDATE {{partition_owners}} AS o SET owner = '', changed_at = clock_timestamp()
		FROM unnest($1::int[], $2::bigint[]) AS r(partition, epoch)
		WHERE o.partition = r.partition AND $3::text IS NOT NULL
		RETURNING o.partition`
	mutantVerify    = `SELECT epoch FROM {{partition_owners}} WHERE partition = $1 AND ($2::text, $3::bigint) IS NOT NULL`
	mutantCondition = `($%d::int, $%d::text, $%d::bigint) IS NOT NULL`
)

type pgStatements struct {
	join, heartbeat, leaving, leave, live, owners, ensure, lock, claim, alive, release, current, verify string
	condition                                                                                           string
}

func renderStatements(n migrate.Names) pgStatements {
	r := func(s string) string { return migrate.Render(s, n) }
	return pgStatements{
		join: r(sqlJoin), heartbeat: r(sqlHeartbeat), leaving: r(sqlLeaving), leave: r(sqlLeave), live: r(sqlLive),
		owners: r(sqlOwners), ensure: r(sqlEnsure), lock: r(sqlLock), claim: r(sqlClaim), alive: r(sqlAlive),
		release: r(sqlRelease), current: r(sqlCurrent), verify: r(sqlVerify), condition: r(sqlCondition),
	}
}

// Postgres is the membership store in PostgreSQL. Lease expiry is decided by
// the database's clock (clock_timestamp()), never the client's. It is safe
// for concurrent use; the zero value is not usable: call NewPostgres.
type Postgres struct {
	db          DB
	tables      migrate.Names
	lockTimeout string // LockTimeout as a lock_timeout setting
	sql         pgStatements
}

// NewPostgres returns a store on db; the schema must have been migrated
// (Migrations). A nil cfg means the defaults. A nil db or a bad cfg give an
// error matching ErrInvalid (and migrate.ErrInvalidName for bad Tables). It
// does no I/O.
func NewPostgres(db DB, cfg *PostgresConfig) (*Postgres, error) {
	c := cfg.withDefaults()
	if db == nil {
		return nil, fmt.Errorf("%w: nil DB", ErrInvalid)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Postgres{
		db: db, tables: c.Tables, sql: renderStatements(c.Tables),
		lockTimeout: fmt.Sprintf("%dms", c.LockTimeout.Milliseconds()),
	}, nil
}

// WithDB returns a copy of the store whose statements run on db — typically
// the caller's transaction — with the same configuration. A claim on such a
// copy runs in db's transaction, and its failure (a lock timeout) aborts it.
func (p *Postgres) WithDB(db DB) *Postgres {
	c := *p
	c.db = db
	return &c
}

// Condition returns a boolean SQL condition that is true only while e is
// its partition's current owner and epoch, with its arguments numbered from
// $first: add it to the WHERE clause of your own write to make that write
// fenced in one statement, with no separate Verify round trip:
//
//	cond, args := store.Condition(e, 3)
//	tag, err := pool.Exec(ctx, `UPDATE accounts SET seq = $2 WHERE id = $1 AND `+cond,
//		append([]any{id, seq}, args...)...)
//	if err == nil && tag.RowsAffected() == 0 {
//		err = store.Check(ctx, e) // stale, or your own condition was false
//	}
//
// The condition share-locks the ownership row, like Verify, so a new owner's
// claim waits until the statement's transaction ends. A write that matched
// no row did not happen: ask Check whether the epoch is stale. first must be
// at least 1.
func (p *Postgres) Condition(e Epoch, first int) (string, []any) {
	cond := p.sql.condition
	if failpoint.Mutant("partition.condition.epoch") {
		cond = mutantCondition
	}
	return fmt.Sprintf(cond, first, first+1, first+2), []any{e.Partition, e.Owner, e.Token}
}

// Join implements Membership.
func (p *Postgres) Join(ctx context.Context, m MemberInfo, ttl time.Duration) (MemberInfo, error) {
	if err := validJoin(m, ttl); err != nil {
		return MemberInfo{}, err
	}
	join := p.sql.join
	if failpoint.Mutant("partition.join.live") {
		join = migrate.Render(mutantJoin, p.tables)
	}
	err := p.db.QueryRow(ctx, join, m.Name, m.Addr, m.Ring, ttl.Microseconds()).Scan(&m.Incarnation)
	if errors.Is(err, pgx.ErrNoRows) {
		return MemberInfo{}, fmt.Errorf("%w: %s", ErrNameInUse, short.Quote(m.Name))
	}
	if err != nil {
		return MemberInfo{}, fmt.Errorf("partition: join %s: %w", short.Quote(m.Name), fence.Check(err, p.tables))
	}
	m.Leaving = false
	return m, nil
}

// Heartbeat implements Membership.
func (p *Postgres) Heartbeat(ctx context.Context, name string, incarnation int64, ttl time.Duration) error {
	if err := validLease(name, incarnation); err != nil {
		return err
	}
	if err := validTTL(ttl); err != nil {
		return err
	}
	heartbeat := p.sql.heartbeat
	if failpoint.Mutant("partition.heartbeat.expired") {
		heartbeat = migrate.Render(mutantHeartbeat, p.tables)
	}
	tag, err := p.db.Exec(ctx, heartbeat, name, incarnation, ttl.Microseconds())
	if err != nil {
		return fmt.Errorf("partition: heartbeat %s: %w", short.Quote(name), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s incarnation %d", ErrExpired, short.Quote(name), incarnation)
	}
	return nil
}

// SetLeaving implements Membership.
func (p *Postgres) SetLeaving(ctx context.Context, name string, incarnation int64) error {
	if err := validLease(name, incarnation); err != nil {
		return err
	}
	tag, err := p.db.Exec(ctx, p.sql.leaving, name, incarnation)
	if err != nil {
		return fmt.Errorf("partition: leaving %s: %w", short.Quote(name), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s incarnation %d", ErrExpired, short.Quote(name), incarnation)
	}
	return nil
}

// Leave implements Membership.
func (p *Postgres) Leave(ctx context.Context, name string, incarnation int64) error {
	if err := validLease(name, incarnation); err != nil {
		return err
	}
	if _, err := p.db.Exec(ctx, p.sql.leave, name, incarnation); err != nil {
		return fmt.Errorf("partition: leave %s: %w", short.Quote(name), err)
	}
	return nil
}

// Live implements Membership.
func (p *Postgres) Live(ctx context.Context) ([]MemberInfo, error) {
	rows, err := p.db.Query(ctx, p.sql.live)
	if err != nil {
		return nil, fmt.Errorf("partition: live members: %w", err)
	}
	var out []MemberInfo
	var m MemberInfo
	_, err = pgx.ForEachRow(rows, []any{&m.Name, &m.Addr, &m.Ring, &m.Incarnation, &m.Leaving}, func() error {
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("partition: live members: %w", err)
	}
	return out, nil
}

// Owners implements Membership.
func (p *Postgres) Owners(ctx context.Context, partitions int) ([]Epoch, error) {
	if partitions < 1 || partitions > MaxPartitions {
		return nil, fmt.Errorf("%w: partitions %d outside [1, %d]", ErrInvalid, partitions, MaxPartitions)
	}
	out := make([]Epoch, partitions)
	for i := range out {
		out[i].Partition = i
	}
	rows, err := p.db.Query(ctx, p.sql.owners, partitions)
	if err != nil {
		return nil, fmt.Errorf("partition: owners: %w", err)
	}
	var e Epoch
	_, err = pgx.ForEachRow(rows, []any{&e.Partition, &e.Owner, &e.Token}, func() error {
		out[e.Partition] = e
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("partition: owners: %w", err)
	}
	return out, nil
}

// Claim implements Membership. It is one round trip: one batch, which runs
// as one transaction; a partition whose row a fenced write holds longer than
// LockTimeout makes the whole claim fail, to be retried.
func (p *Postgres) Claim(ctx context.Context, member string, incarnation int64, partitions []int) ([]Epoch, error) {
	if err := validLease(member, incarnation); err != nil {
		return nil, err
	}
	if err := validPartitions(partitions); err != nil {
		return nil, err
	}
	if len(partitions) == 0 {
		return nil, nil
	}
	out, alive, err := p.claim(ctx, member, incarnation, partitions)
	if err != nil {
		return nil, fmt.Errorf("partition: claim by %s: %w", short.Quote(member), fence.Check(err, p.tables))
	}
	if len(out) == 0 && !alive {
		return nil, fmt.Errorf("%w: %s incarnation %d", ErrExpired, short.Quote(member), incarnation)
	}
	slices.SortFunc(out, func(a, b Epoch) int { return a.Partition - b.Partition })
	return out, nil
}

// claim sends the claim's batch and returns the epochs it claimed and
// whether member's lease is live.
func (p *Postgres) claim(ctx context.Context, member string, incarnation int64, partitions []int) (out []Epoch, alive bool, err error) {
	claim := p.sql.claim
	if failpoint.Mutant("partition.claim.owner") {
		claim = migrate.Render(mutantClaim, p.tables)
	}
	if failpoint.Mutant("partition.claim.lapse") {
		claim = migrate.Render(mutantClaimRead, p.tables)
	}
	var b pgx.Batch
	b.Queue(sqlLockTimeout, p.lockTimeout)
	b.Queue(p.sql.ensure, partitions)
	b.Queue(p.sql.lock, partitions)
	b.Queue(claim, partitions, member, incarnation)
	b.Queue(p.sql.alive, member, incarnation)
	res := p.db.SendBatch(ctx, &b)
	defer func() {
		if cerr := res.Close(); err == nil {
			err = cerr
		}
	}()
	for range 3 {
		if _, err := res.Exec(); err != nil {
			return nil, false, err
		}
	}
	rows, err := res.Query()
	if err != nil {
		return nil, false, err
	}
	e := Epoch{Owner: member}
	if _, err := pgx.ForEachRow(rows, []any{&e.Partition, &e.Token}, func() error {
		out = append(out, e)
		return nil
	}); err != nil {
		return nil, false, err
	}
	if err := res.QueryRow().Scan(&alive); err != nil {
		return nil, false, err
	}
	return out, alive, nil
}

// Release implements Membership.
func (p *Postgres) Release(ctx context.Context, epochs []Epoch) error {
	if len(epochs) == 0 {
		return nil
	}
	byOwner := map[string][]Epoch{}
	for _, e := range epochs {
		if err := validEpoch(e); err != nil {
			return err
		}
		byOwner[e.Owner] = append(byOwner[e.Owner], e)
	}
	release := p.sql.release
	if failpoint.Mutant("partition.release.epoch") {
		release = migrate.Render(mutantRelease, p.tables)
	}
	var errs []error
	for owner, es := range byOwner {
		released, err := p.release(ctx, release, owner, es)
		if err != nil {
			return fmt.Errorf("partition: release: %w", err)
		}
		for _, e := range es {
			if !released[e.Partition] {
				errs = append(errs, p.stale(ctx, p.db, e))
			}
		}
	}
	return errors.Join(errs...)
}

// release runs the release statement for the epochs es of owner and
// returns the partitions it released.
func (p *Postgres) release(ctx context.Context, release, owner string, es []Epoch) (map[int]bool, error) {
	ps := make([]int32, len(es))
	toks := make([]int64, len(es))
	for i, e := range es {
		ps[i], toks[i] = int32(e.Partition), e.Token
	}
	rows, err := p.db.Query(ctx, release, ps, toks, owner)
	if err != nil {
		return nil, err
	}
	released := map[int]bool{}
	var part int
	if _, err := pgx.ForEachRow(rows, []any{&part}, func() error { released[part] = true; return nil }); err != nil {
		return nil, err
	}
	return released, nil
}

// stale returns the *StaleEpochError for e, reading the current owner on db.
func (p *Postgres) stale(ctx context.Context, db DB, e Epoch) error {
	var cur Epoch
	err := db.QueryRow(ctx, p.sql.current, e.Partition).Scan(&cur.Owner, &cur.Token)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("partition: check partition %d: %w", e.Partition, err)
	}
	return staleEpoch(e, cur)
}

// Check implements Membership.
func (p *Postgres) Check(ctx context.Context, e Epoch) error {
	if err := validEpoch(e); err != nil {
		return err
	}
	if failpoint.Mutant("partition.check.epoch") {
		return nil
	}
	var cur Epoch
	err := p.db.QueryRow(ctx, p.sql.current, e.Partition).Scan(&cur.Owner, &cur.Token)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("partition: check partition %d: %w", e.Partition, err)
	}
	if cur.Owner == e.Owner && cur.Token == e.Token {
		return nil
	}
	return staleEpoch(e, cur)
}

// Verify is the fenced write for tables in the same database: call it first
// in the transaction tx that writes for a key of partition e.Partition. It
// returns nil when e is still the partition's current owner and epoch, and
// share-locks the ownership row until tx ends, so a new owner's claim (which
// must update that row) waits for tx to commit or roll back; it returns a
// *StaleEpochError when another owner claimed the partition or it was
// released.
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if err := store.Verify(ctx, tx, e); err != nil {
//			return err
//		}
//		_, err := tx.Exec(ctx, `UPDATE accounts SET seq = seq + 1 WHERE id = $1`, id)
//		return err
//	})
//
// Keep such transactions short: a claim waits at most LockTimeout. Condition
// does the same inside your own statement, saving Verify's round trip.
func (p *Postgres) Verify(ctx context.Context, tx DB, e Epoch) error {
	if err := validEpoch(e); err != nil {
		return err
	}
	verify := p.sql.verify
	if failpoint.Mutant("partition.verify.epoch") {
		verify = migrate.Render(mutantVerify, p.tables)
	}
	var tok int64
	err := tx.QueryRow(ctx, verify, e.Partition, e.Owner, e.Token).Scan(&tok)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("partition: verify partition %d: %w", e.Partition, err)
	}
	return p.stale(ctx, tx, e)
}
