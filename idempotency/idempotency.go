// Package idempotency makes the second execution of a request harmless: a
// request carries a key, the first execution stores its result under that
// key, and every retry gets the stored result instead of running again.
//
// Guarantee, transactional mode ([Postgres.Do], [Memory.Do]): the key is
// claimed inside the transaction that does the work — a transaction of its
// own, or the caller's (store.WithDB(tx).Do). The open transaction is the
// lease: it cannot expire while the work runs, and if it fails — an error, a
// crash, a lost connection — it rolls back the claim with the work, so a
// retry runs again. A duplicate that arrives meanwhile waits for at most
// [PostgresConfig.InFlightWait] and then gets [ErrInFlight] (HTTP 409); once
// the first commits, duplicates get its result with [Result.Replayed] set.
// Each key's work therefore commits exactly once.
//
// Guarantee, leased mode ([Leased], for effects outside the database such as
// a call to a payment provider): an attempt holds an in-progress record with
// a lease renewed in the background and a fencing token minted by the
// database. The work's context is cancelled when the lease is lost, and
// completion, checkpoints and release are compare-and-set on the token: a
// stale attempt can neither overwrite nor delete a newer attempt's record and
// does not answer with its own result ([ErrSuperseded]). Recovery points
// ([Attempt.Step]) let a retry resume after the last completed step.
//
// What it does NOT protect: in leased mode an external effect can still run
// twice — a paused attempt may wake after its lease and call the provider
// anyway. Only the provider can drop the second call; pass it
// [Attempt.DeriveKey] as its own idempotency key. Keys are remembered for
// the store's Retention, then as tombstones for its TombstoneRetention; a
// retry later than that runs again. A key reused with another payload is
// refused ([ErrKeyReused]) only as far as the fingerprint covers the
// payload. The two modes must not share keys.
//
// [Middleware] puts either mode in front of a net/http handler, following
// the IETF draft "The Idempotency-Key HTTP Header Field", with each key
// scoped by the authenticated caller ([MiddlewareConfig.Tenant]). [Fenced] is
// the same operation done with a fenced lock (package fencedlock), for
// comparison.
package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/short"
)

// MaxKeyLen is the longest key ID or tenant, in bytes.
const MaxKeyLen = 255

var (
	// ErrInFlight reports that another execution of the key is running; the
	// error is an *InFlightError. Retry later.
	ErrInFlight = errors.New("idempotency: request in flight")
	// ErrKeyReused reports a key presented with a different fingerprint
	// than the one it was first used with.
	ErrKeyReused = errors.New("idempotency: key reused with a different request")
	// ErrExpired reports a key whose result has expired (and may have been
	// purged): it is spent and will not run again.
	ErrExpired = errors.New("idempotency: key expired")
	// ErrSuperseded reports a leased attempt whose record now belongs to a
	// newer attempt (or no longer exists); the error is a *SupersededError.
	// Nothing was written.
	ErrSuperseded = errors.New("idempotency: attempt superseded")
	// ErrLeaseLost is the cause with which a leased attempt's context is
	// cancelled when its lease expired, could not be renewed in time, or was
	// renewed as often as Keepalive.MaxRenewals allows.
	ErrLeaseLost = errors.New("idempotency: lease lost")
	// ErrRecoveryPointNotReached reports a leased attempt that resumed
	// after a recovery point none of its steps has (a renamed step, a
	// branch not taken), so that it skipped every step: it fails and stores
	// nothing, and the record keeps its recovery point until the code that
	// knows the step runs again or an operator resolves the key.
	ErrRecoveryPointNotReached = errors.New("idempotency: recovery point not reached")
	// ErrInvalid reports bad input, detected before anything was written.
	ErrInvalid = errors.New("idempotency: invalid argument")
	// ErrFenceEra reports a leased-mode Claim that the database refused to
	// mint a token for, because it could be lower than one already handed
	// out: the database moved to a cluster whose WAL timeline is lower than
	// the era it had reached (a restore or an upgrade onto a new cluster).
	// The error is a *FenceError naming the statement an operator runs
	// (fence_advance); it is the same sentinel as fencedlock.ErrFenceEra.
	ErrFenceEra = fence.ErrEra
	// ErrFenceReadOnly reports a leased-mode Claim on a read-only server: a
	// standby (connect with target_session_attrs=read-write) or a read-only
	// transaction. The error is a *FenceError; it is the same sentinel as
	// fencedlock.ErrFenceReadOnly.
	ErrFenceReadOnly = fence.ErrReadOnly
)

// FenceError is a token the database refused to mint: it matches
// ErrFenceEra or ErrFenceReadOnly (its Kind), unwraps to the server's
// *pgconn.PgError, and says what an operator does about it. It is the same
// type as fencedlock.FenceError.
type FenceError = fence.Error

// InFlightError is returned while another execution holds the key.
type InFlightError struct {
	Key Key
	// RetryAfter is a hint for when to try again: the rest of the holder's
	// lease in leased mode, the store's RetryAfter otherwise.
	RetryAfter time.Duration
}

func (e *InFlightError) Error() string {
	return fmt.Sprintf("idempotency: request %s in flight (retry after %v)", e.Key, e.RetryAfter)
}

// Is reports whether target is ErrInFlight.
func (e *InFlightError) Is(target error) bool { return target == ErrInFlight }

// SupersededError is a leased attempt's write refused because its token is
// no longer the record's.
type SupersededError struct {
	Key       Key
	Presented int64 // the attempt's token
	// Required is the record's token, the only one it still accepts; 0 when
	// the record is gone.
	Required int64
}

func (e *SupersededError) Error() string {
	return fmt.Sprintf("idempotency: attempt %d of %s superseded (record token %d)", e.Presented, e.Key, e.Required)
}

// Is reports whether target is ErrSuperseded.
func (e *SupersededError) Is(target error) bool { return target == ErrSuperseded }

// Key identifies one logical request: an ID chosen by the client, scoped by
// a tenant so that two tenants' keys never collide. It is a value.
type Key struct {
	// Tenant scopes ID; empty is one valid scope. At most MaxKeyLen bytes.
	Tenant string
	// ID is the client's idempotency key: 1 to MaxKeyLen bytes of UTF-8.
	ID string
}

// String quotes the key for messages, each part cut to its first 64 bytes
// (with its length): a key comes from a client, and errors stay small.
func (k Key) String() string {
	if k.Tenant == "" {
		return short.Quote(k.ID)
	}
	return short.Quote(k.Tenant) + "/" + short.Quote(k.ID)
}

// Validate reports an error matching ErrInvalid for an empty or oversized ID,
// an oversized tenant, invalid UTF-8 or a NUL byte.
func (k Key) Validate() error {
	if k.ID == "" {
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	for _, f := range []struct{ what, s string }{{"key", k.ID}, {"tenant", k.Tenant}} {
		switch {
		case len(f.s) > MaxKeyLen:
			return fmt.Errorf("%w: %s is %d bytes, longer than %d", ErrInvalid, f.what, len(f.s), MaxKeyLen)
		case !utf8.ValidString(f.s):
			return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, f.what)
		}
		for i := 0; i < len(f.s); i++ {
			if f.s[i] == 0 {
				return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalid, f.what)
			}
		}
	}
	return nil
}

// Fingerprint identifies a request's payload, so that a key reused for a
// different request is refused. The zero Fingerprint is a valid value (a
// request with no payload to compare).
type Fingerprint [sha256.Size]byte

// NewFingerprint hashes parts (for HTTP: method, path, body), each
// length-prefixed so that ("ab", "c") and ("a", "bc") differ.
func NewFingerprint(parts ...[]byte) Fingerprint {
	h := sha256.New()
	h.Write(lengthPrefixed(parts...))
	var f Fingerprint
	h.Sum(f[:0])
	return f
}

func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// lengthPrefixed encodes parts unambiguously: each is preceded by its length
// as 8 big-endian bytes.
func lengthPrefixed(parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += 8 + len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = binary.BigEndian.AppendUint64(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

// keyNamespace is the namespace of the UUIDs DeriveKey makes. It is fixed
// forever: changing it would change every derived key, and a provider would
// charge a retry that spans the change a second time.
var keyNamespace = uuid.MustParse("9e34ae4d-92e5-4070-b111-0f619f71a548")

// DeriveKey returns a key for a downstream call made on behalf of key, the
// same for every attempt of key (it does not depend on the attempt's token),
// so that the downstream service deduplicates a repeated call. parts name
// the call when one request makes several ("charge", "refund").
//
// The result is a name-based UUID, version 5 (RFC 9562), in a namespace of
// lockfree's own, over an unambiguous length-prefixed encoding of the
// tenant, the key's ID and parts: 36 characters, which every provider
// accepts (Stripe takes any string of up to 255 characters; some APIs
// require a UUID), and which reveal nothing of the key.
func DeriveKey(key Key, parts ...string) string {
	b := [][]byte{[]byte(key.Tenant), []byte(key.ID)}
	for _, p := range parts {
		b = append(b, []byte(p))
	}
	return uuid.NewSHA1(keyNamespace, lengthPrefixed(b...)).String()
}

// Result is what an execution answers and what a retry replays. For HTTP it
// is the response; other callers may use Status and Body as they like.
type Result struct {
	// Status is an HTTP status code, or any integer the caller chooses.
	Status int
	// Header holds the response headers to replay; nil for none.
	Header http.Header
	// Body is the response body.
	Body []byte
	// Replayed is true when the result was stored by an earlier execution.
	// It is set by the store, not stored.
	Replayed bool
}

// empty reports a result with nothing to store.
func (r Result) empty() bool { return r.Status == 0 && len(r.Header) == 0 && len(r.Body) == 0 }

// State is where a key's record is in its life.
type State int

const (
	// Running: an execution has claimed the key and not finished.
	Running State = iota + 1
	// Done: the result is stored and is replayed until the record expires.
	Done
	// Expired: the result expired (and may have been purged to a tombstone);
	// the key is spent.
	Expired
)

func (s State) String() string {
	switch s {
	case Running:
		return "running"
	case Done:
		return "done"
	case Expired:
		return "expired"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Record is a key's stored state, as Lookup reports it.
type Record struct {
	Key         Key
	Fingerprint Fingerprint
	State       State
	// Token is the fencing token of the leased attempt (or of the fenced
	// twin's lock) that last wrote the record; 0 in transactional mode.
	Token int64
	// RecoveryPoint is the last step a leased attempt completed.
	RecoveryPoint string
	// Result is the stored result when State is Done.
	Result Result
	// LeaseExpires is when a running leased attempt's lease ends, and
	// Expires when the record's retention ends; both on the store's clock.
	LeaseExpires, Expires time.Time

	leaseLeft time.Duration // the rest of a running lease, for retry hints
}

// Executor runs fn at most once per key: the first call for a key runs fn
// and stores its result; later calls with the same key and fingerprint
// return the stored result (Replayed set) without running fn. *Memory,
// *Postgres (transactional mode), *Leased and *Fenced implement it.
//
// Do returns an *InFlightError while another execution of the key runs,
// ErrKeyReused for a different fingerprint, ErrExpired for a spent key, an
// error matching ErrInvalid for a bad key (before anything is written), and
// fn's own error, in which case nothing is stored and a retry runs fn again.
type Executor interface {
	Do(ctx context.Context, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (Result, error)
}

// Lease is one leased attempt's hold on a key: what LeaseStore.Claim returns
// and Renew extends. It is a value; copies are independent.
type Lease struct {
	Key Key
	// Token is the attempt's fencing token: strictly greater than every
	// earlier attempt's token for the key, constant across renewals.
	Token int64
	// TTL is the lease duration.
	TTL time.Duration
	// Expires is when the lease ends, on the store's clock.
	Expires time.Time
	// RecoveryPoint is the last step recorded for the key when the lease
	// was granted ("" for none); an attempt resumes after it.
	RecoveryPoint string

	sent time.Time // local monotonic time the granting request was sent
}

// LeaseStore holds leased-mode records. *Memory and *Postgres implement it;
// implementations are safe for concurrent use. Every method validates its
// input first (ErrInvalid) and decides expiry on the store's clock.
type LeaseStore interface {
	// Claim starts an attempt: it creates the key's record, or takes over a
	// running record whose lease has expired (keeping its recovery point),
	// with a new token. If the key is done it returns the stored result
	// (Replayed set) and no lease. Otherwise it returns an *InFlightError,
	// ErrKeyReused or ErrExpired.
	Claim(ctx context.Context, key Key, fp Fingerprint, ttl time.Duration) (Lease, *Result, error)
	// Renew extends an unexpired lease by its TTL, keeping the token. It
	// returns a *SupersededError when a newer attempt holds the record and
	// an error matching ErrLeaseLost when the lease expired; it never
	// revives an expired lease.
	Renew(ctx context.Context, l Lease) (Lease, error)
	// Checkpoint records step as the key's recovery point if l's token is
	// still the record's (even if its lease expired, as long as nobody took
	// over), and returns a *SupersededError otherwise.
	Checkpoint(ctx context.Context, l Lease, step string) error
	// Complete stores r and marks the key done if l's token is still the
	// record's, and returns a *SupersededError otherwise.
	Complete(ctx context.Context, l Lease, r Result) error
	// Release gives the key up after a failed attempt, if l's token is still
	// the record's: a record without a recovery point is deleted (a retry
	// starts afresh), one with a recovery point keeps it and only ends the
	// lease. It returns a *SupersededError otherwise.
	Release(ctx context.Context, l Lease) error
}

// FencedStore is the record store of the fenced-lock twin ([Fenced]): every
// write carries the lock's fencing token, and the record refuses a token
// lower than the highest it has seen, with a *fencedlock.FencedError.
// *Memory and *Postgres implement it; implementations are safe for
// concurrent use.
type FencedStore interface {
	// ReadFenced raises key's record token to token and returns the record
	// (its State is Running while no result is stored: a new key gets a
	// placeholder, so that no older holder can store a result afterwards).
	// It refuses a token lower than the record's.
	ReadFenced(ctx context.Context, key Key, fp Fingerprint, token int64) (Record, error)
	// PutFenced stores r as key's result, written by the lock tenure with
	// fencing token token, unless the record has seen a higher token.
	PutFenced(ctx context.Context, key Key, fp Fingerprint, token int64, r Result) error
	// DropFenced deletes key's placeholder left by ReadFenced, after the
	// work failed, if token is still the record's; a stored result stays.
	DropFenced(ctx context.Context, key Key, token int64) error
}

// Lease limits.
const (
	// MinTTL is the shortest lease a leased attempt may take.
	MinTTL = time.Millisecond
	// MaxTTL is the longest lease.
	MaxTTL = 24 * time.Hour
)

// keeping is what both stores' configs say of their records: how long they
// are kept, and how a duplicate waits for an execution in flight.
type keeping struct {
	Retention, TombstoneRetention, InFlightWait, RetryAfter time.Duration
}

func (k keeping) withDefaults() keeping {
	if k.Retention == 0 {
		k.Retention = 24 * time.Hour
	}
	if k.TombstoneRetention == 0 {
		k.TombstoneRetention = 7 * 24 * time.Hour
	}
	k.InFlightWait, k.RetryAfter = waitDefaults(k.InFlightWait, k.RetryAfter)
	return k
}

// waitDefaults fills the two settings every mode shares on how a duplicate
// waits for an execution in flight.
func waitDefaults(inFlightWait, retryAfter time.Duration) (time.Duration, time.Duration) {
	if inFlightWait == 0 {
		inFlightWait = 2 * time.Second
	}
	if retryAfter == 0 {
		retryAfter = time.Second
	}
	return inFlightWait, retryAfter
}

// validateWait checks what waitDefaults filled.
func validateWait(inFlightWait, retryAfter time.Duration) error {
	switch {
	case inFlightWait < time.Millisecond:
		// lock_timeout = 0 would mean "wait forever".
		return fmt.Errorf("%w: InFlightWait %v must be ≥ 1ms", ErrInvalid, inFlightWait)
	case retryAfter < 0:
		return fmt.Errorf("%w: RetryAfter %v must not be negative", ErrInvalid, retryAfter)
	}
	return nil
}

func (k keeping) validate() error {
	switch {
	case k.Retention < time.Millisecond:
		return fmt.Errorf("%w: Retention %v must be ≥ 1ms", ErrInvalid, k.Retention)
	case k.TombstoneRetention < 0:
		return fmt.Errorf("%w: TombstoneRetention %v must not be negative", ErrInvalid, k.TombstoneRetention)
	}
	return validateWait(k.InFlightWait, k.RetryAfter)
}

func validClaim(key Key, ttl time.Duration) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl %v outside [%v, %v]", ErrInvalid, ttl, MinTTL, MaxTTL)
	}
	return nil
}

func validLease(l Lease) error {
	if err := validClaim(l.Key, l.TTL); err != nil {
		return err
	}
	if l.Token <= 0 {
		return fmt.Errorf("%w: lease has no token", ErrInvalid)
	}
	return nil
}

func validToken(key Key, token int64) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if token <= 0 {
		return fmt.Errorf("%w: fencing token %d must be positive", ErrInvalid, token)
	}
	return nil
}

func validStep(step string) error {
	if step == "" || len(step) > MaxKeyLen || !utf8.ValidString(step) {
		return fmt.Errorf("%w: recovery point must be 1 to %d bytes of UTF-8", ErrInvalid, MaxKeyLen)
	}
	return nil
}

// classify turns a record found by a claim into the claim's answer. A
// running leased attempt's rest of lease is the retry hint; retryAfter is
// the hint for a transactional claim.
func classify(rec Record, fp Fingerprint, retryAfter time.Duration) (*Result, error) {
	if rec.Token > 0 {
		retryAfter = leaseRetryAfter(rec.leaseLeft)
	}
	if rec.State == Expired && failpoint.Mutant("idempotency.expired") {
		rec.State = Done // replays what is left of a spent key
	}
	switch {
	case rec.Fingerprint != fp && !failpoint.Mutant("idempotency.fingerprint"):
		return nil, fmt.Errorf("%w: %s", ErrKeyReused, rec.Key)
	case rec.State == Expired:
		return nil, fmt.Errorf("%w: %s", ErrExpired, rec.Key)
	case rec.State == Done:
		r := rec.Result
		r.Replayed = true
		return &r, nil
	}
	return nil, &InFlightError{Key: rec.Key, RetryAfter: retryAfter}
}

// leaseRetryAfter is the retry hint for a running record: the rest of its
// lease, rounded up to a whole second (HTTP's Retry-After unit).
func leaseRetryAfter(left time.Duration) time.Duration {
	if left < time.Second {
		return time.Second
	}
	return left.Round(time.Second)
}
