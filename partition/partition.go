// Package partition routes every entity to one owning member of a fleet and
// runs the entity's work on that member's serial executor for its partition,
// with an epoch that fences the work's writes.
//
// Keys hash to a fixed number of partitions; partitions are placed on the live
// members by a consistent-hash ring with bounded loads
// (github.com/buraksezer/consistent v1.0.0, FNV-1a 64). The ring is a pure
// function of (live member names, [RingConfig], library version), so every
// member computes the same placement without talking to the others.
// Membership is a heartbeat lease per member and ownership a row per
// partition with an epoch, both kept by a [Membership] ([Postgres] or
// [Memory]).
//
// Guarantee: a partition's epoch only increases, and a member claims a
// partition — bumping its epoch — only after the previous owner released it
// (having stopped accepting work and drained what was running: begin handoff →
// drain → release, then bump → start) or after the previous owner's
// membership lease expired on the store's clock. While members keep their
// leases, at most one member accepts work for a partition at any moment, and
// [Member.Do] runs one function at a time per partition, in arrival order.
// A write that presents its (partition, owner, epoch) to the store —
// [Postgres.Condition] in the write's own statement, [Postgres.Verify] inside
// the write's transaction, [Memory.Verify] for a resource in memory — is
// rejected (a *[StaleEpochError]) once a newer owner has claimed the
// partition.
//
// What it does NOT protect: a member that pauses (GC, swap, SIGSTOP) longer
// than its lease is replaced while its functions may still be running; when
// it wakes, its writes land unless they are fenced as above. Writes to systems
// that cannot check the epoch are not protected. Routing is advisory: callers
// that do not go through Do, or that cache an owner, reach no executor at all.
// Members must agree on the [RingConfig] and on the library version — v0.10.0
// of the ring library places 221 of 271 partitions differently from v1.0.0;
// members record their ring's [Ring.ID] and [Member.Start] refuses to join a
// fleet with a different one. Changing the partition count remaps keys, so
// the epoch of a key's old partition says nothing about its new one.
//
// Example (memory backend, one member):
//
//	store, _ := partition.NewMemory(nil)
//	m, _ := partition.NewMember(store, &partition.Config{Name: "a", Addr: "10.0.0.1:8080"})
//	if err := m.Start(ctx); err != nil { … }
//	defer m.Stop(ctx)
//	err := m.Do(ctx, "account-42", func(ctx context.Context, e partition.Epoch) error {
//		return store.Verify(e, func() error { balance["account-42"]++; return nil })
//	})
package partition

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/lockfree-go/lockfree/internal/short"
)

var (
	// ErrNotOwner reports a key whose partition another member owns; the
	// error is a *NotOwnerError naming it, so the caller can forward.
	ErrNotOwner = errors.New("partition: not the owner")
	// ErrMoving reports a key whose partition is between owners (being
	// handed over, or this member's lease cannot be trusted): retry shortly.
	ErrMoving = errors.New("partition: partition is moving")
	// ErrStaleEpoch reports a write whose epoch is no longer the
	// partition's current one; the error is a *StaleEpochError.
	ErrStaleEpoch = errors.New("partition: stale epoch")
	// ErrExpired reports a heartbeat for a membership lease that expired or
	// belongs to another incarnation.
	ErrExpired = errors.New("partition: membership lease expired")
	// ErrNameInUse reports a Join under a name whose lease is still live.
	ErrNameInUse = errors.New("partition: member name in use")
	// ErrRingMismatch reports a member whose ring differs from the live
	// fleet's (another partition count, load, or library version).
	ErrRingMismatch = errors.New("partition: ring differs from the fleet's")
	// ErrStopped reports a call on a Member that is not running: before
	// Start returned, or once Stop has begun to leave.
	ErrStopped = errors.New("partition: member not running")
	// ErrPanic reports a function run by Member.Do that panicked; the error
	// is a *PanicError. The executor survives and runs the next call.
	ErrPanic = errors.New("partition: function panicked")
	// ErrInvalid reports bad input or configuration, detected before
	// anything was written.
	ErrInvalid = errors.New("partition: invalid argument")
)

// MaxNameLen is the longest member name or address, in bytes.
const MaxNameLen = 255

// Epoch is one tenure of one member over one partition: what a function run
// by [Member.Do] presents with its writes. It is a value; copies are
// independent.
type Epoch struct {
	// Partition is the partition the key hashes to.
	Partition int
	// Owner is the member that claimed the partition.
	Owner string
	// Token is the fencing token: strictly greater than every earlier
	// tenure's token for Partition, and constant for this tenure.
	Token int64
}

// NotOwnerError is returned by Do for a key owned by another member. It is
// a value the caller may keep; it matches ErrNotOwner.
type NotOwnerError struct {
	Key       string
	Partition int
	Owner     string // the member the ring places the partition on
	Addr      string // its address, as it joined; "" when unknown
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("partition: key %s (partition %d) is owned by %s at %s",
		short.Quote(e.Key), e.Partition, short.Quote(e.Owner), short.Quote(e.Addr))
}

// Is reports whether target is ErrNotOwner.
func (e *NotOwnerError) Is(target error) bool { return target == ErrNotOwner }

// PanicError is a panic recovered from a function that Member.Do ran. The
// function runs on its partition's executor goroutine, where no caller's
// recovery (net/http's included) could reach it, so Do recovers it instead
// of letting it end the process. It matches ErrPanic.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the panicking goroutine's stack (runtime/debug.Stack)
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("partition: function panicked: %v", e.Value)
}

// Is reports whether target is ErrPanic.
func (e *PanicError) Is(target error) bool { return target == ErrPanic }

// StaleEpochError is a write, release or check refused because its epoch is
// no longer its partition's current one: another member claimed the
// partition, or its owner released it. It matches ErrStaleEpoch.
type StaleEpochError struct {
	// Partition is the partition of the refused epoch.
	Partition int
	// Presented is the epoch the writer carried (its Epoch.Token).
	Presented int64
	// Required is the partition's current epoch: only a write presenting
	// it, from Owner, is accepted. It is 0 for a partition never claimed.
	Required int64
	// Owner is the partition's current owner; "" when it was released, and
	// no write is accepted until the next claim, whose epoch is higher.
	Owner string
}

func (e *StaleEpochError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("partition: stale epoch %d for partition %d (current epoch %d, released)",
			e.Presented, e.Partition, e.Required)
	}
	return fmt.Sprintf("partition: stale epoch %d for partition %d (current epoch %d, owner %s)",
		e.Presented, e.Partition, e.Required, short.Quote(e.Owner))
}

// Is reports whether target is ErrStaleEpoch.
func (e *StaleEpochError) Is(target error) bool { return target == ErrStaleEpoch }

// staleEpoch is the refusal of e by a partition whose current row is cur.
func staleEpoch(e, cur Epoch) *StaleEpochError {
	return &StaleEpochError{Partition: e.Partition, Presented: e.Token, Required: cur.Token, Owner: cur.Owner}
}

func validName(what, s string, allowEmpty bool) error {
	switch {
	case s == "" && !allowEmpty:
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

func validEpoch(e Epoch) error {
	if e.Partition < 0 || e.Partition >= MaxPartitions {
		return fmt.Errorf("%w: partition %d outside [0, %d)", ErrInvalid, e.Partition, MaxPartitions)
	}
	if err := validName("owner", e.Owner, false); err != nil {
		return err
	}
	if e.Token <= 0 {
		return fmt.Errorf("%w: epoch %d", ErrInvalid, e.Token)
	}
	return nil
}
