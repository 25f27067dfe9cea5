// Package fencedlock is a lease lock whose every tenure carries a fencing
// token, plus the resource-side check that makes the token matter.
//
// Guarantee: tokens strictly increase per lock name and never go back — not on
// release, expiry, row clean-up ([Postgres.Purge]) or a server restart — and
// stay constant while one tenure is renewed. A resource that accepts a write
// only when its token is at least the highest it has seen ([Fence.Update],
// [Postgres.Verify], [Gate]) rejects a holder that paused past its lease and
// woke up after another holder took over.
//
// [Locker] is the building block: Do acquires a lock (waiting while it is
// busy), keeps the lease alive while a function runs with it, and releases
// it when the function returns or panics. Every fenced twin in lockfree is
// built on it.
//
//	locker, _ := fencedlock.NewLocker(store, &fencedlock.LockerConfig{LockPrefix: "inventory/"})
//	err := locker.Do(ctx, "sku-42", func(ctx context.Context, lease fencedlock.Lease) error {
//		return fence.Update(ctx, pool, "sku-42", lease.Token, "qty = qty - $1", 1)
//	})
//
// What it does NOT protect: the lock alone excludes nothing. A holder that
// pauses (GC, swap, VM migration, SIGSTOP) longer than its lease still runs its
// critical section; only the fencing check at the resource stops its write. A
// resource that cannot check a token (a third-party API) is not protected by
// any lock. The keepalive ([Keep]) cancels a context before the server can
// re-grant the lease, which stops work that looks at the context, but a pause
// stops the keepalive too.
//
// Failover: [Postgres] mints tokens in fence eras — the WAL timeline the
// server writes on, read in the acquiring statement, times 2^40 plus the
// sequence's value — so every token minted after a standby is promoted
// exceeds every token minted before, even with asynchronous replication that
// lost the old primary's last WAL, and an isolated old primary that goes on
// granting locks mints tokens that a resource which has seen the new
// primary's refuses. A failover that creates no timeline (a restore or an
// upgrade onto a new cluster) needs an operator to run fence_advance; until
// then Acquire fails with ErrFenceEra if the era went back. docs/failover.md
// states the limits.
//
// Two backends implement [Store]: [Postgres] (the database's clock decides
// expiry) and [Memory] (a [clock.Clock]; one process).
package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/short"
)

// Limits on what Acquire accepts.
const (
	// MaxNameLen is the longest lock name or holder, in bytes.
	MaxNameLen = 255
	// MinTTL is the shortest lease: the database keeps microseconds, and a
	// shorter lease would expire before its acquire returned.
	MinTTL = time.Millisecond
	// MaxTTL is the longest lease. A lock held longer than a day is an
	// outage waiting for its holder to crash.
	MaxTTL = 24 * time.Hour
)

var (
	// ErrHeld reports a lock that another holder holds; the error is a *HeldError.
	ErrHeld = errors.New("fencedlock: lock held by another holder")
	// ErrNotHeld reports a Renew, Release or Verify for a lease that is no
	// longer current: it expired, was released, or another holder took over.
	ErrNotHeld = errors.New("fencedlock: lease not held")
	// ErrFenced reports a write with a token lower than one the resource has
	// already seen; the error is a *FencedError.
	ErrFenced = errors.New("fencedlock: stale fencing token")
	// ErrNotFound reports a fenced write to a row that does not exist.
	ErrNotFound = errors.New("fencedlock: row not found")
	// ErrInvalid reports bad input, detected before anything was written.
	ErrInvalid = errors.New("fencedlock: invalid argument")
	// ErrFenceEra reports an Acquire that the database refused to mint a
	// token for, because the token could be lower than one already handed
	// out: the database moved to a cluster whose WAL timeline is lower than
	// the era it had reached (a restore or an upgrade onto a new cluster).
	// Every lockfree package that mints fences in PostgreSQL returns it, as
	// a *FenceError; it stays until an operator, once every server of the
	// old cluster is gone, runs the fence_advance statement the error gives
	// (SELECT lockfree_fence_advance(), with the tables' schema and prefix).
	ErrFenceEra = fence.ErrEra
	// ErrFenceReadOnly reports an Acquire on a read-only server: a standby
	// (connect with target_session_attrs=read-write) or a read-only
	// transaction. The error is a *FenceError.
	ErrFenceReadOnly = fence.ErrReadOnly
)

// FenceError is a fence the database refused to mint: it matches
// ErrFenceEra or ErrFenceReadOnly (its Kind), unwraps to the server's
// *pgconn.PgError, and says what an operator does about it.
type FenceError = fence.Error

// Causes with which a [Keepalive]'s context is cancelled.
var (
	// ErrLost: a renewal found that the lease is no longer held.
	ErrLost = errors.New("fencedlock: lease lost")
	// ErrExpiring: no renewal succeeded and the lease is within its safety
	// margin of expiring.
	ErrExpiring = errors.New("fencedlock: lease about to expire without renewal")
	// ErrMaxRenewals: the keepalive renewed as often as it was allowed to.
	ErrMaxRenewals = errors.New("fencedlock: maximum renewals reached")
	// ErrStopped: the keepalive was stopped or the lease released by its owner.
	ErrStopped = errors.New("fencedlock: keepalive stopped")
)

// HeldError is returned by Acquire when another holder has the lock.
type HeldError struct {
	Name   string
	Holder string // the current holder
	Token  int64  // the current holder's token
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("fencedlock: lock %s held by %s (token %d)", short.Quote(e.Name), short.Quote(e.Holder), e.Token)
}

// Is reports whether target is ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// FencedError is a write rejected by the resource because its token is stale.
type FencedError struct {
	Presented int64 // the token the write carried
	Required  int64 // the lowest token the resource still accepts
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("fencedlock: stale fencing token %d (resource requires ≥ %d)", e.Presented, e.Required)
}

// Is reports whether target is ErrFenced.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Lease is one tenure of a lock: what Acquire returns and Renew extends.
// It is a value; copies are independent.
type Lease struct {
	Name   string
	Holder string
	// Token is the fencing token: strictly greater than any earlier tenure's
	// token for Name, and the same for every renewal of this tenure.
	Token int64
	// TTL is the lease duration requested at Acquire and used by Renew.
	TTL time.Duration
	// Expires is when the server will consider the lock free, on the
	// server's clock. Compare it only with other server times.
	Expires time.Time

	// sent is the local monotonic time at which the request that set
	// Expires was sent: the server's expiry is no earlier than sent+TTL.
	sent time.Time
}

// SafeUntil returns the local (monotonic) time until which the holder may
// assume it still holds the lease, keeping margin in hand: TTL − margin from
// the moment the granting request was sent. The zero Time for a Lease that did
// not come from Acquire or Renew.
func (l Lease) SafeUntil(margin time.Duration) time.Time {
	if l.sent.IsZero() {
		return time.Time{}
	}
	return l.sent.Add(l.TTL - margin)
}

// Store is the lock service. Implementations are safe for concurrent use.
type Store interface {
	// Acquire grants the lock to holder for ttl if it is free or expired,
	// with a new token. It returns a *HeldError when another lease is
	// current, including one of the same holder: a holder that lost track
	// of its lease waits for it to expire.
	Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error)
	// Renew extends a current lease by its TTL from now, keeping its token.
	// It returns ErrNotHeld if the lease expired (renewal never revives one),
	// was released, or was superseded.
	Renew(ctx context.Context, lease Lease) (Lease, error)
	// Release frees the lock if lease is still the current tenure, and
	// returns ErrNotHeld otherwise; it never frees another tenure's lock.
	// The tenure is lease's Name, Holder and Token; its TTL is not needed,
	// so a lease from Holder can be released (an administrator's forced
	// release of a stuck holder's lock).
	Release(ctx context.Context, lease Lease) error
	// Holder returns the current lease of name; held is false when the lock
	// is free or expired. The returned Lease has no TTL and no local send
	// time: it can be released (and verified, Postgres.Verify), not renewed
	// or kept alive.
	Holder(ctx context.Context, name string) (lease Lease, held bool, err error)
}

func validName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	case len(s) > MaxNameLen:
		return fmt.Errorf("%w: %s is %d bytes, longer than %d", ErrInvalid, what, len(s), MaxNameLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, what)
	}
	for _, r := range s {
		if r == 0 {
			return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalid, what)
		}
	}
	return nil
}

func validTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl %v outside [%v, %v]", ErrInvalid, ttl, MinTTL, MaxTTL)
	}
	return nil
}

func validAcquire(name, holder string, ttl time.Duration) error {
	if err := validName("lock name", name); err != nil {
		return err
	}
	if err := validName("holder", holder); err != nil {
		return err
	}
	return validTTL(ttl)
}

// validLease checks a lease to renew or keep alive: it needs its TTL.
func validLease(l Lease) error {
	if err := validTenure(l); err != nil {
		return err
	}
	return validTTL(l.TTL)
}

// validTenure checks a lease to release or verify: name, holder and token
// identify the tenure, so a lease from Holder (no TTL) will do.
func validTenure(l Lease) error {
	if err := validName("lock name", l.Name); err != nil {
		return err
	}
	if err := validName("holder", l.Holder); err != nil {
		return err
	}
	if l.Token <= 0 {
		return fmt.Errorf("%w: lease has no token", ErrInvalid)
	}
	return nil
}
