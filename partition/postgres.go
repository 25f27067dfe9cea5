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

	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the schema of the PostgreSQL backend, for migrate.Up
// and migrate.Print (or `lockfree migrate`).
func Migrations() []migrate.Migration {
	return migrate.FromDir("partition", migrationFiles, "migrations")
}

// Querier is what a fenced write needs: *pgxpool.Pool, *pgx.Conn and pgx.Tx
// satisfy it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is what the PostgreSQL backend needs from a connection:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it. Claim runs a
// transaction (a savepoint inside a pgx.Tx).
type DB interface {
	Querier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// PostgresConfig configures a Postgres store. The zero value is valid.
type PostgresConfig struct {
	// Tables says where the tables live. Defaults to the connection's
	// search_path and the prefix "lockfree_".
	Tables migrate.Names
	// LockTimeout bounds how long a claim waits for a partition row that a
	// fenced write (Verify) of the previous owner holds; the claim is then
	// skipped and retried at the member's next step. Defaults to 1s.
	LockTimeout time.Duration
}

// Postgres is the membership store in PostgreSQL. Lease expiry is decided by
// the database's clock (clock_timestamp()), never the client's. It is safe
// for concurrent use.
type Postgres struct {
	db          DB
	lockTimeout string
	sql         struct {
		join, heartbeat, alive, leaving, leave, live, owners, ensure, lock, claim, release, check, verify string
		ownersTable                                                                                       string
	}
}

// NewPostgres returns a store on db; the schema must have been migrated
// (Migrations). A nil cfg means the zero PostgresConfig. A nil db or an
// invalid configuration give an error matching ErrInvalid.
func NewPostgres(db DB, cfg *PostgresConfig) (*Postgres, error) {
	if cfg == nil {
		cfg = &PostgresConfig{}
	}
	if db == nil {
		return nil, fmt.Errorf("partition: invalid config: %w: nil DB", ErrInvalid)
	}
	if err := cfg.Tables.Validate(); err != nil {
		return nil, fmt.Errorf("partition: invalid config: %w: %w", ErrInvalid, err)
	}
	lt := cfg.LockTimeout
	if lt == 0 {
		lt = time.Second
	}
	if lt < time.Millisecond {
		return nil, fmt.Errorf("partition: invalid config: %w: lock timeout %v", ErrInvalid, lt)
	}
	p := &Postgres{db: db, lockTimeout: fmt.Sprintf("%dms", lt.Milliseconds())}
	r := func(s string) string { return migrate.Render(s, cfg.Tables) }
	p.sql.join = r(`INSERT INTO {{partition_members}} AS m (name, addr, ring, incarnation, leaving, joined_at, expires_at)
		VALUES ($1, $2, $3, nextval({{regclass partition_incarnations}}), false, clock_timestamp(),
		        clock_timestamp() + $4 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET addr = excluded.addr, ring = excluded.ring, incarnation = excluded.incarnation,
		    leaving = false, joined_at = excluded.joined_at, expires_at = excluded.expires_at
		WHERE m.expires_at <= clock_timestamp()
		RETURNING incarnation`)
	p.sql.heartbeat = r(`UPDATE {{partition_members}} SET expires_at = clock_timestamp() + $3 * interval '1 microsecond'
		WHERE name = $1 AND incarnation = $2 AND expires_at > clock_timestamp()`)
	p.sql.alive = r(`SELECT 1 FROM {{partition_members}}
		WHERE name = $1 AND incarnation = $2 AND expires_at > clock_timestamp()`)
	p.sql.leaving = r(`UPDATE {{partition_members}} SET leaving = true
		WHERE name = $1 AND incarnation = $2 AND expires_at > clock_timestamp()`)
	p.sql.leave = r(`DELETE FROM {{partition_members}} WHERE name = $1 AND incarnation = $2`)
	p.sql.live = r(`SELECT name, addr, ring, incarnation, leaving FROM {{partition_members}}
		WHERE expires_at > clock_timestamp() ORDER BY name COLLATE "C"`)
	p.sql.owners = r(`SELECT partition, owner, epoch FROM {{partition_owners}} WHERE partition < $1`)
	p.sql.ensure = r(`INSERT INTO {{partition_owners}} (partition, owner, epoch, changed_at)
		SELECT p, '', 0, clock_timestamp() FROM unnest($1::int[]) AS p ORDER BY p
		ON CONFLICT (partition) DO NOTHING`)
	// The rows are locked first, in order, and the claim runs as a second
	// statement: its snapshot then sees every membership change committed
	// before the locks were granted, so a just-joined owner is not taken
	// for dead.
	p.sql.lock = r(`SELECT partition FROM {{partition_owners}} WHERE partition = ANY($1) ORDER BY partition FOR UPDATE`)
	p.sql.claim = r(`UPDATE {{partition_owners}} AS o SET owner = $2, epoch = o.epoch + 1, changed_at = clock_timestamp()
		WHERE o.partition = ANY($1)
		  AND EXISTS (SELECT 1 FROM {{partition_members}} me
		              WHERE me.name = $2 AND me.incarnation = $3 AND me.expires_at > clock_timestamp())
		  AND (o.owner = '' OR o.owner = $2 OR NOT EXISTS (
		       SELECT 1 FROM {{partition_members}} m WHERE m.name = o.owner AND m.expires_at > clock_timestamp()))
		RETURNING o.partition, o.epoch`)
	p.sql.release = r(`UPDATE {{partition_owners}} AS o SET owner = '', changed_at = clock_timestamp()
		FROM unnest($1::int[], $2::bigint[]) AS r(partition, epoch)
		WHERE o.partition = r.partition AND o.epoch = r.epoch AND o.owner = $3
		RETURNING o.partition`)
	p.sql.check = r(`SELECT owner, epoch FROM {{partition_owners}} WHERE partition = $1`)
	p.sql.verify = r(`SELECT epoch FROM {{partition_owners}}
		WHERE partition = $1 AND owner = $2 AND epoch = $3 FOR SHARE`)
	p.sql.ownersTable = r(`{{partition_owners}}`)
	return p, nil
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
//		err = store.Check(ctx, e) // fenced, or your own condition was false
//	}
//
// The condition share-locks the ownership row, like Verify, so a new owner's
// claim waits until the statement's transaction ends. A write that matched
// no row did not happen: ask Check whether the epoch is stale.
func (p *Postgres) Condition(e Epoch, first int) (string, []any) {
	return fmt.Sprintf("EXISTS (SELECT FROM %s WHERE partition = $%d AND owner = $%d AND epoch = $%d FOR SHARE)",
		p.sql.ownersTable, first, first+1, first+2), []any{e.Partition, e.Owner, e.Token}
}

// WithDB returns a store that runs its statements on db — typically the
// caller's transaction — with the same configuration.
func (p *Postgres) WithDB(db DB) *Postgres {
	c := *p
	c.db = db
	return &c
}

// Join implements Membership.
func (p *Postgres) Join(ctx context.Context, m MemberInfo, ttl time.Duration) (MemberInfo, error) {
	if err := validJoin(m, ttl); err != nil {
		return MemberInfo{}, err
	}
	err := p.db.QueryRow(ctx, p.sql.join, m.Name, m.Addr, m.Ring, ttl.Microseconds()).Scan(&m.Incarnation)
	if errors.Is(err, pgx.ErrNoRows) {
		return MemberInfo{}, fmt.Errorf("%w: %s", ErrNameInUse, short.Quote(m.Name))
	}
	if err != nil {
		return MemberInfo{}, fmt.Errorf("partition: join %s: %w", short.Quote(m.Name), err)
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
	tag, err := p.db.Exec(ctx, p.sql.heartbeat, name, incarnation, ttl.Microseconds())
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

// Claim implements Membership. It runs one transaction; a partition whose
// row is held longer than LockTimeout by a fenced write makes the whole
// claim fail, to be retried.
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
	var out []Epoch
	err := pgx.BeginFunc(ctx, p.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", p.lockTimeout); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, p.sql.ensure, partitions); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, p.sql.lock, partitions); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, p.sql.claim, partitions, member, incarnation)
		if err != nil {
			return err
		}
		e := Epoch{Owner: member}
		_, err = pgx.ForEachRow(rows, []any{&e.Partition, &e.Token}, func() error {
			out = append(out, e)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("partition: claim by %s: %w", short.Quote(member), err)
	}
	if len(out) == 0 {
		// Nothing claimed: say so if it is because the claimant is not live.
		var one int
		err := p.db.QueryRow(ctx, p.sql.alive, member, incarnation).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%w: %s incarnation %d", ErrExpired, short.Quote(member), incarnation)
		}
		if err != nil {
			return nil, fmt.Errorf("partition: claim by %s: %w", short.Quote(member), err)
		}
	}
	slices.SortFunc(out, func(a, b Epoch) int { return a.Partition - b.Partition })
	return out, nil
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
	var errs []error
	for owner, es := range byOwner {
		ps := make([]int32, len(es))
		toks := make([]int64, len(es))
		for i, e := range es {
			ps[i], toks[i] = int32(e.Partition), e.Token
		}
		rows, err := p.db.Query(ctx, p.sql.release, ps, toks, owner)
		if err != nil {
			return fmt.Errorf("partition: release: %w", err)
		}
		released := map[int]bool{}
		var part int
		if _, err := pgx.ForEachRow(rows, []any{&part}, func() error { released[part] = true; return nil }); err != nil {
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

// stale returns the *FencedError for e, reading the current owner.
func (p *Postgres) stale(ctx context.Context, db Querier, e Epoch) error {
	fe := &FencedError{Presented: e}
	err := db.QueryRow(ctx, p.sql.check, e.Partition).Scan(&fe.Owner, &fe.Token)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("partition: check partition %d: %w", e.Partition, err)
	}
	return fe
}

// Check implements Membership.
func (p *Postgres) Check(ctx context.Context, e Epoch) error {
	if err := validEpoch(e); err != nil {
		return err
	}
	err := p.stale(ctx, p.db, e)
	var fe *FencedError
	if errors.As(err, &fe) && fe.Owner == e.Owner && fe.Token == e.Token {
		return nil
	}
	return err
}

// Verify is the fenced write for tables in the same database: call it first
// in the transaction tx that writes for a key of partition e.Partition. It
// returns nil when e is still the partition's current owner and epoch, and
// share-locks the ownership row until tx ends, so a new owner's claim (which
// must update that row) waits for tx to commit or roll back; it returns a
// *FencedError when another owner claimed the partition or it was released.
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if err := store.Verify(ctx, tx, e); err != nil {
//			return err
//		}
//		_, err := tx.Exec(ctx, `UPDATE accounts SET seq = seq + 1 WHERE id = $1`, id)
//		return err
//	})
//
// Keep such transactions short: a claim waits at most LockTimeout.
func (p *Postgres) Verify(ctx context.Context, tx Querier, e Epoch) error {
	if err := validEpoch(e); err != nil {
		return err
	}
	var tok int64
	err := tx.QueryRow(ctx, p.sql.verify, e.Partition, e.Owner, e.Token).Scan(&tok)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("partition: verify partition %d: %w", e.Partition, err)
	}
	return p.stale(ctx, tx, e)
}
