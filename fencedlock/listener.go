package fencedlock

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/migrate"
)

// Listener wakes waiters when a lock is released, through PostgreSQL's
// LISTEN/NOTIFY: use it as WaitConfig.Wakeups with a Postgres store created
// with Notify set. Create it with NewListener and run it with Run; it is safe
// for concurrent use. Notifications are a hint: a waiter still polls, so a
// lost connection only makes waiting slower.
type Listener struct {
	pool    *pgxpool.Pool
	channel string

	waiters waitList
}

// NewListener returns a listener for the lock tables named by tables (the
// PostgresConfig.Tables of the stores that release). A nil pool or invalid
// tables give an error matching ErrInvalid.
func NewListener(pool *pgxpool.Pool, tables migrate.Names) (*Listener, error) {
	if pool == nil {
		return nil, fmt.Errorf("fencedlock: invalid listener: %w: nil pool", ErrInvalid)
	}
	if err := tables.Validate(); err != nil {
		return nil, fmt.Errorf("fencedlock: invalid listener: %w: %w", ErrInvalid, err)
	}
	return &Listener{pool: pool, channel: releaseChannel(tables)}, nil
}

// releaseChannel is the NOTIFY channel of the lock table named by tables.
func releaseChannel(tables migrate.Names) string { return tables.Raw("lock_released") }

// Run holds one pooled connection listening for releases until ctx ends,
// reconnecting after failures, and returns ctx's cause.
func (l *Listener) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		l.listen(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return context.Cause(ctx)
}

func (l *Listener) listen(ctx context.Context) {
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return
	}
	defer func() {
		// The connection is LISTENing: do not give it back to the pool.
		conn.Hijack().Close(context.Background())
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return
	}
	// Releases that happened before LISTEN took effect were missed: wake
	// everyone once, they re-check.
	l.waiters.wake("")
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return
		}
		l.waiters.wake(n.Payload)
	}
}

// Released implements Wakeups.
func (l *Listener) Released(name string) (<-chan struct{}, func()) { return l.waiters.add(name) }
