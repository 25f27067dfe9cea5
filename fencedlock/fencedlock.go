// Package fencedlock is a lease lock whose every tenure carries a fencing
// token, plus the resource-side check that makes the token matter.
//
// Guarantee:
//   - A lock is granted only when free or expired on the store's clock.
//   - Tokens strictly increase per lock name and never go back: not on
//     release, expiry, [Postgres.Purge], a restart or a standby's promotion.
//     A renewal keeps the token.
//   - Release and Renew act only for the exact (holder, token): a holder
//     that paused past its lease gets [ErrNotHeld], on every [Store].
//   - A resource that checks the token ([Fence.Update], [Fence.Read],
//     [Postgres.Verify], [Gate]) rejects the paused holder's write.
//
// What it does NOT protect:
//   - The lock alone excludes nothing: a paused holder (GC, swap, SIGSTOP)
//     still runs its critical section. Only the resource's check stops it.
//   - A resource that cannot check a token (a third-party API).
//   - A failover that creates no WAL timeline (a restore onto a new cluster,
//     pg_upgrade) is not seen by the tokens: an operator runs fence_advance.
//     Acquire fails with [ErrFenceEra] meanwhile if the timeline went back.
//
// [Locker] is the building block of every fenced twin in lockfree: Do
// acquires (waiting while the lock is busy), keeps the lease alive while a
// function runs, and releases it when the function returns or panics.
//
//	locker, _ := fencedlock.NewLocker(store, &fencedlock.LockerConfig{LockPrefix: "inventory/"})
//	err := locker.Do(ctx, "sku-42", func(ctx context.Context, lease fencedlock.Lease) error {
//		return fence.Update(ctx, pool, "sku-42", lease.Token, "qty = qty - $1", 1)
//	})
//
// Two backends implement [Store] and its optional abilities ([ValueStore],
// [MultiStore], [Lister], [Watcher]): [Postgres], whose clock decides
// expiry, and [Memory], for one process. There is no counted semaphore:
// docs/fencedlock.md says what to use instead, and has the acquire path,
// fence eras, operations, metrics, the fault tests and the benchmarks.
package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lockfree-go/lockfree/internal/failpoint"
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
	// MaxValueLen is the longest value on a lease, in bytes: enough for who
	// holds it and why (an address, a job's name, a small JSON object), small
	// enough that every renewal rewrites the row cheaply.
	MaxValueLen = 1024
	// MaxAcquireAll is the most names one AcquireAll takes.
	MaxAcquireAll = 100
	// MaxListLimit is the largest page List returns.
	MaxListLimit = 1000
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
	// ErrValueTooLarge reports a lease value longer than MaxValueLen; the
	// error is a *ValueTooLargeError, and matches ErrInvalid too.
	ErrValueTooLarge = errors.New("fencedlock: lease value too large")
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

// ValueTooLargeError is a lease value longer than MaxValueLen, refused
// before anything was written. It matches ErrValueTooLarge and ErrInvalid.
type ValueTooLargeError struct {
	Size int // the value's length, in bytes
	Max  int // MaxValueLen
}

func (e *ValueTooLargeError) Error() string {
	return fmt.Sprintf("fencedlock: lease value too large: %d bytes, at most %d", e.Size, e.Max)
}

// Is reports whether target is ErrValueTooLarge or ErrInvalid.
func (e *ValueTooLargeError) Is(target error) bool {
	return target == ErrValueTooLarge || target == ErrInvalid
}

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
	// Value is the tenure's value (ValueStore): set at the grant
	// (AcquireValue) or by the holder (SetValue), "" when none. It is bytes
	// in a string: any bytes, at most MaxValueLen of them. A new tenure
	// starts without one: no holder sees another tenure's value.
	Value string

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
	// with a new token and no value. It returns a *HeldError when another
	// lease is current, including one of the same holder: a holder that
	// lost track of its lease waits for it to expire.
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
	// Holder returns the current lease of name, with its value; held is
	// false when the lock is free or expired. The returned Lease has no TTL
	// and no local send time: it can be released (and verified,
	// Postgres.Verify), not renewed or kept alive.
	Holder(ctx context.Context, name string) (lease Lease, held bool, err error)
}

// ValueStore is a Store that keeps a small value on each lease — who holds
// it, for what — set at the grant and changed only by the holder. Memory and
// Postgres implement it.
type ValueStore interface {
	Store
	// AcquireValue is Acquire, with value on the new lease, set in the same
	// step as the grant. A value longer than MaxValueLen is a
	// *ValueTooLargeError, refused before anything is written.
	AcquireValue(ctx context.Context, name, holder string, ttl time.Duration, value string) (Lease, error)
	// SetValue replaces the value of lease's tenure and returns lease with
	// it. It returns ErrNotHeld unless lease is the current unexpired tenure
	// (name, holder and token): no one else changes a holder's value. Like
	// Renew, it needs a lease from Acquire, AcquireValue or Renew, with its
	// TTL: one from Holder is ErrInvalid.
	SetValue(ctx context.Context, lease Lease, value string) (Lease, error)
}

// MultiStore is a Store that acquires several locks at once, all or
// nothing. Memory and Postgres implement it.
type MultiStore interface {
	Store
	// AcquireAll acquires every one of names for holder, each with its own
	// token, or none of them. leases[i] is the lease of names[i]. When one
	// is held, it returns a *HeldError naming the first such name in sorted
	// order, and holds nothing: a failed AcquireAll leaves no lock taken.
	// Names are taken in sorted order (by bytes), so that two AcquireAll of
	// overlapping sets cannot deadlock. Between 1 and MaxAcquireAll distinct
	// valid names, or ErrInvalid before anything is written.
	AcquireAll(ctx context.Context, names []string, holder string, ttl time.Duration) (leases []Lease, err error)
}

// Lister is a Store that lists its held locks, for operators. Memory and
// Postgres implement it.
type Lister interface {
	// List returns a page of the locks held now (unexpired), in name order
	// (by bytes), with their values and the store's clock.
	List(ctx context.Context, q ListQuery) (Page, error)
}

// ListQuery selects the locks List returns. The zero value asks for the
// first page of every held lock.
type ListQuery struct {
	// Prefix keeps the names that start with it. Defaults to "" (every
	// name).
	Prefix string
	// After starts the page after this name: the previous Page's Next.
	// Defaults to "" (the first page).
	After string
	// Limit bounds the page, between 1 and MaxListLimit. Defaults to 100.
	Limit int
}

// Page is one page of held locks.
type Page struct {
	// Locks are the held locks, in name order.
	Locks []Holding
	// Now is the store's clock when it listed them: compare Since and
	// Expires with Now, never with the local clock.
	Now time.Time
	// Next is the After of the next page; "" when this page is the last.
	Next string
}

// Holding is one held lock, as List reports it.
type Holding struct {
	// Lease is the tenure, with its value; like Holder's, it has no TTL: it
	// can be released (an operator's forced release), not renewed.
	Lease
	// Since is when the tenure was granted, on the store's clock.
	Since time.Time
}

// Watcher tells watchers that a lock changed hands or value, so that they
// need not wait for their next poll. Memory implements it, and so does
// Postgres (with Notify, on a pool).
type Watcher interface {
	// Changed returns a channel closed at the next release of name, grant
	// by AcquireValue, or SetValue, and a function to call when the caller
	// stops watching. A nil channel means no notice will come: the caller
	// polls. A grant by Acquire may close it or not (Postgres sends no
	// notice for it, so that a Locker's acquires cost nothing more), and an
	// expiry closes nothing: watchers poll as well.
	Changed(name string) (<-chan struct{}, func())
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

// ValidValue returns a *ValueTooLargeError for a value longer than
// MaxValueLen, and nil otherwise: any bytes will do.
func ValidValue(value string) error {
	if len(value) > MaxValueLen {
		return &ValueTooLargeError{Size: len(value), Max: MaxValueLen}
	}
	return nil
}

// validAcquireAll checks an AcquireAll and returns the indexes of names in
// the order to take them: sorted by name.
func validAcquireAll(names []string, holder string, ttl time.Duration) ([]int, error) {
	if len(names) == 0 || len(names) > MaxAcquireAll {
		return nil, fmt.Errorf("%w: AcquireAll of %d names, want 1 to %d", ErrInvalid, len(names), MaxAcquireAll)
	}
	for _, n := range names {
		if err := validAcquire(n, holder, ttl); err != nil {
			return nil, err
		}
	}
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	for k := 1; k < len(order); k++ {
		if names[order[k]] == names[order[k-1]] {
			return nil, fmt.Errorf("%w: AcquireAll names %s twice", ErrInvalid, short.Quote(names[order[k]]))
		}
	}
	if failpoint.Mutant("fencedlock.acquireall.order") {
		for i := range order {
			order[i] = i // the caller's order
		}
	}
	return order, nil
}

func (q ListQuery) withDefaults() ListQuery {
	if q.Limit == 0 {
		q.Limit = 100
	}
	return q
}

func (q ListQuery) validate() error {
	if q.Limit < 1 || q.Limit > MaxListLimit {
		return fmt.Errorf("%w: list limit %d outside [1, %d]", ErrInvalid, q.Limit, MaxListLimit)
	}
	for what, s := range map[string]string{"list prefix": q.Prefix, "list after": q.After} {
		if len(s) > MaxNameLen || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return fmt.Errorf("%w: %s must be valid UTF-8 without NUL, at most %d bytes", ErrInvalid, what, MaxNameLen)
		}
	}
	return nil
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
