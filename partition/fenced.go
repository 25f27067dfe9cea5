package partition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// FencedConfig configures a Fenced. Holder is required.
type FencedConfig struct {
	// Holder names this process in the locks. Required.
	Holder string
	// TTL is each lock's lease. Defaults to 10s.
	TTL time.Duration
	// Prefix starts every lock name (Prefix + key). Defaults to "partition/".
	Prefix string
	// Wait configures the wait for a busy key's lock. Defaults to the
	// fencedlock.WaitConfig defaults.
	Wait *fencedlock.WaitConfig
	// Keepalive configures the renewal of the lease while fn runs; NewFenced
	// checks it against TTL (fencedlock.KeepaliveConfig.Validate).
	// Defaults to the fencedlock.KeepaliveConfig defaults.
	Keepalive *fencedlock.KeepaliveConfig
	// ReleaseTimeout bounds the release after fn. Defaults to 5s.
	ReleaseTimeout time.Duration
}

// Fenced is the fenced-lock twin of Member.Do: no partitions and no
// membership, but a lease lock per key (fencedlock) taken around every call,
// waited for when busy, and released after it. It serialises the calls of
// one key across every process that shares the lock store, as Member.Do does
// for the owner of the key's partition, at the price of a lock round trip
// (acquire and release) per call. It is safe for concurrent use.
//
// The same caveat as every lock applies: a holder that pauses past its lease
// is still running fn when the next holder starts, so fn must fence its
// writes with lease.Token (fencedlock.Fence.Update, Postgres.Verify, Gate).
type Fenced struct {
	locks fencedlock.Store
	cfg   FencedConfig
}

// NewFenced returns the twin over locks.
func NewFenced(locks fencedlock.Store, cfg FencedConfig) (*Fenced, error) {
	if locks == nil {
		return nil, fmt.Errorf("partition: invalid config: %w: nil lock store", ErrInvalid)
	}
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "partition/"
	}
	if cfg.ReleaseTimeout <= 0 {
		cfg.ReleaseTimeout = 5 * time.Second
	}
	if err := validName("holder", cfg.Holder, false); err != nil {
		return nil, fmt.Errorf("partition: invalid config: %w", err)
	}
	if cfg.TTL < fencedlock.MinTTL || cfg.TTL > fencedlock.MaxTTL {
		return nil, fmt.Errorf("partition: invalid config: %w: ttl %v", ErrInvalid, cfg.TTL)
	}
	if len(cfg.Prefix) >= fencedlock.MaxNameLen {
		return nil, fmt.Errorf("partition: invalid config: %w: prefix of %d bytes", ErrInvalid, len(cfg.Prefix))
	}
	if cfg.Keepalive != nil {
		if err := cfg.Keepalive.Validate(cfg.TTL); err != nil {
			return nil, fmt.Errorf("partition: invalid config: %w: %w", ErrInvalid, err)
		}
	}
	return &Fenced{locks: locks, cfg: cfg}, nil
}

// Do acquires key's lock (waiting while another holder has it, until ctx
// ends), runs fn with the lease under a keepalive whose context fn gets, and
// releases the lock — also when fn panics, before the panic goes on. It
// returns fn's error, or the lock's: an error matching fencedlock.ErrInvalid
// for a key too long for a lock name.
func (f *Fenced) Do(ctx context.Context, key string, fn func(ctx context.Context, lease fencedlock.Lease) error) (err error) {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	name := f.cfg.Prefix + key
	lease, err := fencedlock.AcquireWait(ctx, f.locks, name, f.cfg.Holder, f.cfg.TTL, f.cfg.Wait)
	if err != nil {
		return err
	}
	k, err := fencedlock.Keep(ctx, f.locks, lease, f.cfg.Keepalive)
	if err != nil {
		return errors.Join(err, f.locks.Release(context.WithoutCancel(ctx), lease))
	}
	// Deferred, so that a panicking fn does not leave the lock renewed for
	// nobody.
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.ReleaseTimeout)
		defer cancel()
		relErr := k.Release(rctx)
		if err == nil && !errors.Is(relErr, fencedlock.ErrNotHeld) { // expired first: fencing decided fn's writes
			err = relErr
		}
	}()
	return fn(k.Context(), lease)
}
