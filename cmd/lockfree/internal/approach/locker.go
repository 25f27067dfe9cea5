package approach

import (
	"context"
	"strconv"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/fencedlock"
)

// Holder is the lock holder's name of env's client: the same in a crashed
// worker's replacement, which runs as that client.
func Holder(env *engine.Env) string { return "worker-" + strconv.Itoa(env.Client) }

// LockWait is how the twins wait for a busy lock: polled from half a
// millisecond up to 20ms, woken by the lock service's notifications.
func LockWait() *fencedlock.WaitConfig {
	return &fencedlock.WaitConfig{MinDelay: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond}
}

// NaiveLocker is the lock of a naive twin on env's lock service, its names
// prefixed with prefix: the fenced twins' settings, so that the two differ
// by the fence alone.
func NaiveLocker(env *engine.Env, prefix string) (*fencedlock.Locker, error) {
	return fencedlock.NewLocker(env.Locks, &fencedlock.LockerConfig{
		TTL:           env.LeaseTTL,
		Holder:        Holder(env),
		LockPrefix:    prefix,
		Wait:          LockWait(),
		MeterProvider: env.MeterProvider,
	})
}

// SameContext is the context of the naive lock's writes on PostgreSQL:
// the operation's, as its fenced twin's. A stop at the before-write point
// is not spent from its deadline (the engine's operation deadline), and a
// stopped process does not see its lease's context end.
func SameContext(ctx context.Context) (context.Context, context.CancelFunc) { return ctx, func() {} }

// WriteContext is the context of the writes a Redis lock's client sends
// after its before-write point: ctx's values, not its deadline, bounded by
// engine.WriteTimeout. A client starved for the lock (no Redis library here
// queues its waiters) may have spent most of its operation's deadline
// waiting; the fault, not what is left of that deadline, must decide
// whether a stale write lands.
func WriteContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), engine.WriteTimeout)
}
