package fencedlock

import (
	"context"
	"embed"
	"errors"
	"fmt"
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
	return migrate.FromDir("fencedlock", migrationFiles, "migrations")
}

// DB is what the PostgreSQL backend needs from a connection:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it, so every operation can
// run inside the caller's own transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// PostgresConfig configures a Postgres store. The zero value is valid.
type PostgresConfig struct {
	// Tables says where the lock table lives. Defaults to the
	// connection's search_path and the prefix "lockfree_".
	Tables migrate.Names
	// Notify sends a NOTIFY on every release so that waiters using a
	// [Listener] wake at once. NOTIFY serialises committing transactions on
	// a server-wide lock, so it costs throughput. Defaults to false.
	Notify bool
}

// Postgres is the lock service in PostgreSQL. Expiry is decided by the
// database's clock (clock_timestamp()), never the client's. It is safe for
// concurrent use.
type Postgres struct {
	db      DB
	notify  bool
	channel string // the NOTIFY channel, bound as an argument
	sql     struct {
		ensure, acquire, holder, renew, release, releaseNotify, verify, current, purge string
	}
}

// NewPostgres returns a store on db; the schema must have been migrated
// (Migrations). A nil cfg means the zero PostgresConfig. A nil db or invalid
// Tables give an error matching ErrInvalid.
func NewPostgres(db DB, cfg *PostgresConfig) (*Postgres, error) {
	if cfg == nil {
		cfg = &PostgresConfig{}
	}
	if db == nil {
		return nil, fmt.Errorf("fencedlock: invalid config: %w: nil DB", ErrInvalid)
	}
	if err := cfg.Tables.Validate(); err != nil {
		return nil, fmt.Errorf("fencedlock: invalid config: %w: %w", ErrInvalid, err)
	}
	p := &Postgres{db: db, notify: cfg.Notify, channel: releaseChannel(cfg.Tables)}
	r := func(s string) string { return migrate.Render(s, cfg.Tables) }
	// ensure gives a new name a free row with no token, so that the token
	// is always minted by the UPDATE below, after it holds the row lock: a
	// nextval() evaluated before the lock could predate a tenure that
	// commits first, and hand out a smaller token after it.
	p.sql.ensure = r(`INSERT INTO {{locks}} (name, holder, token, acquired_at, expires_at)
		VALUES ($1, '', 0, '-infinity', '-infinity') ON CONFLICT (name) DO NOTHING`)
	p.sql.acquire = r(`UPDATE {{locks}}
		SET holder = $2, token = nextval({{regclass lock_tokens}}),
		    acquired_at = clock_timestamp(), expires_at = clock_timestamp() + $3 * interval '1 microsecond'
		WHERE name = $1 AND expires_at <= clock_timestamp()
		RETURNING token, expires_at`)
	p.sql.holder = r(`SELECT holder, token, expires_at FROM {{locks}}
		WHERE name = $1 AND expires_at > clock_timestamp()`)
	p.sql.renew = r(`UPDATE {{locks}} SET expires_at = clock_timestamp() + $4 * interval '1 microsecond'
		WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > clock_timestamp()
		RETURNING expires_at`)
	p.sql.release = r(`UPDATE {{locks}} SET expires_at = clock_timestamp()
		WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > clock_timestamp()`)
	p.sql.releaseNotify = `WITH released AS (` + p.sql.release + ` RETURNING name)
		SELECT pg_notify($4, name) FROM released`
	p.sql.verify = r(`SELECT token FROM {{locks}}
		WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > clock_timestamp() FOR SHARE`)
	p.sql.current = r(`SELECT token FROM {{locks}} WHERE name = $1`)
	p.sql.purge = r(`DELETE FROM {{locks}} WHERE name IN (
		SELECT name FROM {{locks}} WHERE expires_at < clock_timestamp() - $1 * interval '1 microsecond'
		ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`)
	return p, nil
}

// WithDB returns a store that runs its statements on db — typically the
// caller's transaction — with the same configuration.
func (p *Postgres) WithDB(db DB) *Postgres {
	c := *p
	c.db = db
	return &c
}

// Acquire implements Store. It runs two statements in one round trip.
func (p *Postgres) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	if err := validAcquire(name, holder, ttl); err != nil {
		return Lease{}, err
	}
	// A miss followed by a free lock means it was released between the two
	// statements; try again a few times before reporting contention.
	for attempt := 0; ; attempt++ {
		l, err := p.acquire(ctx, name, holder, ttl)
		if !errors.Is(err, pgx.ErrNoRows) {
			return l, err
		}
		cur, held, herr := p.Holder(ctx, name)
		if herr != nil {
			return Lease{}, herr
		}
		if held || attempt == 2 {
			return Lease{}, &HeldError{Name: name, Holder: cur.Holder, Token: cur.Token}
		}
	}
}

func (p *Postgres) acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	sent := time.Now()
	var b pgx.Batch
	b.Queue(p.sql.ensure, name)
	b.Queue(p.sql.acquire, name, holder, ttl.Microseconds())
	res := p.db.SendBatch(ctx, &b)
	_, err := res.Exec()
	var l Lease
	if err == nil {
		err = res.QueryRow().Scan(&l.Token, &l.Expires)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, err
	}
	if err != nil {
		return Lease{}, fmt.Errorf("fencedlock: acquire %s: %w", short.Quote(name), err)
	}
	l.Name, l.Holder, l.TTL, l.sent = name, holder, ttl, sent
	return l, nil
}

// Renew implements Store.
func (p *Postgres) Renew(ctx context.Context, l Lease) (Lease, error) {
	if err := validLease(l); err != nil {
		return Lease{}, err
	}
	sent := time.Now()
	err := p.db.QueryRow(ctx, p.sql.renew, l.Name, l.Holder, l.Token, l.TTL.Microseconds()).Scan(&l.Expires)
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
	var n int64
	if p.notify {
		rows, err := p.db.Query(ctx, p.sql.releaseNotify, l.Name, l.Holder, l.Token, p.channel)
		if err != nil {
			return fmt.Errorf("fencedlock: release %s: %w", short.Quote(l.Name), err)
		}
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("fencedlock: release %s: %w", short.Quote(l.Name), err)
		}
	} else {
		tag, err := p.db.Exec(ctx, p.sql.release, l.Name, l.Holder, l.Token)
		if err != nil {
			return fmt.Errorf("fencedlock: release %s: %w", short.Quote(l.Name), err)
		}
		n = tag.RowsAffected()
	}
	if n == 0 {
		return fmt.Errorf("%w: release %s token %d", ErrNotHeld, short.Quote(l.Name), l.Token)
	}
	return nil
}

// Holder implements Store.
func (p *Postgres) Holder(ctx context.Context, name string) (Lease, bool, error) {
	if err := validName("lock name", name); err != nil {
		return Lease{}, false, err
	}
	l := Lease{Name: name}
	err := p.db.QueryRow(ctx, p.sql.holder, name).Scan(&l.Holder, &l.Token, &l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("fencedlock: holder %s: %w", short.Quote(name), err)
	}
	return l, true, nil
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
// sequence, not from the rows. Call it in a loop until it returns less than
// limit; rows being acquired at the same moment are skipped, not waited for.
func (p *Postgres) Purge(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	if olderThan < 0 || limit <= 0 {
		return 0, fmt.Errorf("%w: purge olderThan %v limit %d", ErrInvalid, olderThan, limit)
	}
	tag, err := p.db.Exec(ctx, p.sql.purge, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("fencedlock: purge: %w", err)
	}
	return tag.RowsAffected(), nil
}
