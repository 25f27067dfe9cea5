package partition

import (
	"context"
	"fmt"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// FencedConfig configures a Fenced. A nil *FencedConfig means the defaults.
type FencedConfig struct {
	// LockerConfig configures the lock taken around each call: Holder
	// (defaults to a UUIDv7), TTL (10s), Wait, Keepalive, ReleaseTimeout
	// (5s), as fencedlock.LockerConfig says. LockPrefix starts every lock
	// name (LockPrefix + key) and defaults to "partition/".
	fencedlock.LockerConfig
}

func (c *FencedConfig) withDefaults() fencedlock.LockerConfig {
	var d fencedlock.LockerConfig
	if c != nil {
		d = c.LockerConfig
	}
	if d.LockPrefix == "" {
		d.LockPrefix = "partition/"
	}
	return d
}

// Fenced is the fenced-lock twin of Member.Do: no partitions and no
// membership, but a lease lock per key (a fencedlock.Locker) taken around
// every call, waited for when busy, kept alive while the call runs, and
// released after it. It serialises the calls of one key across every process
// that shares the lock store, as Member.Do does for the owner of the key's
// partition, at the price of a lock round trip (acquire and release) per
// call. It is safe for concurrent use; the zero value is not usable: call
// NewFenced.
//
// The same caveat as every lock applies: a holder that pauses past its lease
// is still running fn when the next holder starts, so fn must fence its
// writes with lease.Token (fencedlock.Fence, fencedlock.Postgres.Verify,
// fencedlock.Gate).
type Fenced struct {
	locker *fencedlock.Locker
	prefix string
}

// NewFenced returns the twin over the lock store locks. A nil cfg means the
// defaults. A nil store or a bad cfg give an error matching ErrInvalid (and
// fencedlock.ErrInvalid for the lock's settings). It does no I/O.
func NewFenced(locks fencedlock.Store, cfg *FencedConfig) (*Fenced, error) {
	if locks == nil {
		return nil, fmt.Errorf("%w: nil lock store", ErrInvalid)
	}
	c := cfg.withDefaults()
	l, err := fencedlock.NewLocker(locks, &c)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return &Fenced{locker: l, prefix: c.LockPrefix}, nil
}

// Holder returns the holder identity the twin's locks are taken with.
func (f *Fenced) Holder() string { return f.locker.Holder() }

// Do acquires key's lock (waiting while another holder has it, until ctx
// ends), runs fn with the lease under a keepalive whose context fn gets, and
// releases the lock — also when fn panics, before the panic goes on. It
// returns fn's error joined with the release's, or the acquire's error.
// Once fn has returned nil, Do returns nil: a release that fails then only
// delays the next holder until the lease expires, and an error would invite
// a retry of finished work. A key too long for a lock name (with the
// prefix, fencedlock.MaxNameLen bytes) is an error matching ErrInvalid,
// before anything is written.
func (f *Fenced) Do(ctx context.Context, key string, fn func(ctx context.Context, lease fencedlock.Lease) error) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	if err := validName("lock name (prefix and key)", f.prefix+key, false); err != nil {
		return err
	}
	ran := false
	err := f.locker.Do(ctx, key, func(ctx context.Context, lease fencedlock.Lease) error {
		// Between the acquire and fn's writes: where a pause can outlast
		// the lease.
		failpoint.Inject(ctx, "partition.fenced.before-write")
		err := fn(ctx, lease)
		ran = err == nil
		return err
	})
	if ran {
		return nil // with fn done, a release error only delays the next holder
	}
	return err
}
