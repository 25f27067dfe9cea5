package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Status is how a guarded piece of work ended.
type Status int

const (
	// Done: the lock was acquired and the work succeeded.
	Done Status = iota + 1
	// HeldElsewhere: another holder had the lock; the work did not run.
	HeldElsewhere
	// Fenced: the work ran but the resource rejected its token (a newer
	// tenure had written): the work's effect did not happen.
	Fenced
)

func (s Status) String() string {
	switch s {
	case Done:
		return "done"
	case HeldElsewhere:
		return "held elsewhere"
	case Fenced:
		return "fenced"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Outcome describes a Guard call.
type Outcome struct {
	Status Status
	// Lease is the tenure the work ran under (zero for HeldElsewhere).
	Lease Lease
	// Holder and Token name the other holder for HeldElsewhere.
	Holder string
	Token  int64
	// Presented and Required are the rejected and the required token for
	// Fenced.
	Presented, Required int64
}

// GuardConfig configures Guard. The zero value is valid.
type GuardConfig struct {
	// Keepalive configures the renewal of the lease while the work runs;
	// the work's context is the keepalive's. Guard checks it
	// (KeepaliveConfig.Validate) before acquiring. Defaults to the
	// KeepaliveConfig defaults.
	Keepalive *KeepaliveConfig
	// ReleaseTimeout bounds the release after the work. Defaults to 5s.
	ReleaseTimeout time.Duration
}

// Guard acquires name for holder, runs work with the lease, and releases the
// lease when work returns — or panics: the lease is then released before the
// panic goes on. The work must present lease.Token to the resource
// (Fence.Update, Postgres.Verify, Gate.Do); a rejection (an error matching
// ErrFenced) is reported as a Fenced outcome with a nil error.
//
// The error is non-nil for infrastructure failures and for errors of work
// other than fencing; Outcome.Status is then zero unless the lock was held
// elsewhere (Status HeldElsewhere, nil error). The work's context is
// cancelled when the lease can no longer be trusted.
func Guard(ctx context.Context, store Store, name, holder string, ttl time.Duration,
	cfg *GuardConfig, work func(ctx context.Context, lease Lease) error) (Outcome, error) {
	var c GuardConfig
	if cfg != nil {
		c = *cfg
	}
	if c.ReleaseTimeout <= 0 {
		c.ReleaseTimeout = 5 * time.Second
	}
	if c.Keepalive != nil {
		// Before acquiring: a keepalive that cannot run must not cost a lock.
		if err := c.Keepalive.Validate(ttl); err != nil {
			return Outcome{}, err
		}
	}
	lease, err := store.Acquire(ctx, name, holder, ttl)
	var held *HeldError
	if errors.As(err, &held) {
		return Outcome{Status: HeldElsewhere, Holder: held.Holder, Token: held.Token}, nil
	}
	if err != nil {
		return Outcome{}, err
	}
	k, err := Keep(ctx, store, lease, c.Keepalive)
	if err != nil {
		return Outcome{Lease: lease}, errors.Join(err, store.Release(context.WithoutCancel(ctx), lease))
	}
	workErr, relErr := runKept(ctx, k, lease, c.ReleaseTimeout, work)

	var fenced *FencedError
	switch {
	case errors.As(workErr, &fenced):
		return Outcome{Status: Fenced, Lease: lease, Presented: fenced.Presented, Required: fenced.Required}, relErr
	case workErr != nil:
		return Outcome{Lease: lease}, errors.Join(workErr, relErr)
	case relErr != nil:
		return Outcome{Status: Done, Lease: lease}, relErr
	}
	return Outcome{Status: Done, Lease: lease}, nil
}

// runKept runs work under k and then stops k and releases its lease, bounded
// by timeout. The release is deferred so that work that panics does not leave
// its lease renewed for nobody: it is released before the panic goes on.
func runKept(ctx context.Context, k *Keepalive, lease Lease, timeout time.Duration,
	work func(ctx context.Context, lease Lease) error) (workErr, relErr error) {
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		relErr = k.Release(rctx)
		if errors.Is(relErr, ErrNotHeld) {
			// Expired before release: nothing to free; fencing decided the work.
			relErr = nil
		}
	}()
	return work(k.Context(), lease), nil
}
