// Package partition routes every entity to one owning member of a fleet,
// runs the entity's work on that member's serial executor, and fences the
// work's writes with the partition's epoch. Example first (memory backend).
//
// Keys hash to a fixed number of partitions. A consistent-hash ring with
// bounded loads (github.com/buraksezer/consistent) places them on the live
// members; every member computes the same placement. Membership is a
// heartbeat lease per member; ownership is a row per partition with an
// epoch, kept by a [Membership] ([Postgres] or [Memory]).
//
// Guarantee:
//   - A partition's epoch only increases. A member claims a partition only
//     after the previous owner released it (drained) or its lease expired.
//   - While members keep their leases, at most one accepts work for a
//     partition; [Member.Do] runs one function at a time per partition.
//   - A write that presents its epoch ([Postgres.Condition],
//     [Postgres.Verify], [Memory.Verify]) is refused with a
//     *[StaleEpochError] once a newer owner claimed the partition.
//
// Not protected:
//   - A member paused past its lease: its unfenced writes land.
//   - Writes to systems that cannot check the epoch.
//   - Callers that bypass Do or cache an owner.
//   - Members that disagree on [RingConfig] or the ring library's version:
//     [Member.Start] refuses a fleet whose [Ring.ID] differs.
//   - A change of the partition count remaps keys.
//
// docs/partition.md has the handoff, Forward, metrics and fault tests.
package partition

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/lockfree-go/lockfree/internal/fence"
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
	// ErrFenceEra reports a Join or Claim that the database refused to
	// mint an incarnation or epoch for, because it could be lower than one
	// already handed out: the database moved to a cluster whose WAL
	// timeline is lower than the era it had reached (a restore or an
	// upgrade onto a new cluster). The error is a *FenceError naming the
	// statement an operator runs (fence_advance); it is the same sentinel
	// as fencedlock.ErrFenceEra.
	ErrFenceEra = fence.ErrEra
	// ErrFenceReadOnly reports a Join or Claim on a read-only server: a
	// standby (connect with target_session_attrs=read-write) or a read-only
	// transaction. The error is a *FenceError; it is the same sentinel as
	// fencedlock.ErrFenceReadOnly.
	ErrFenceReadOnly = fence.ErrReadOnly
)

// FenceError is an incarnation or epoch the database refused to mint: it
// matches ErrFenceEra or ErrFenceReadOnly (its Kind), unwraps to the
// server's *pgconn.PgError, and says what an operator does about it. It is
// the same type as fencedlock.FenceError.
type FenceError = fence.Error

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
