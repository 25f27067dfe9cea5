// Package atomic changes counters in one conditional statement, so that
// exclusion needs no lock: the check and the write are one indivisible step
// at the resource.
//
//	UPDATE inventory SET quantity = quantity - $1
//	WHERE sku = $2 AND quantity >= $1 RETURNING quantity
//
// Guarantee: every operation of a [Store] applies entirely or not at all,
// and only if its condition holds on the value at the moment it changes it:
//   - a decrement never takes a value below the floor, an increment never
//     above its cap;
//   - a compare-and-set or set-if-greater never overwrites a value it did not
//     check; a claim succeeds once per key;
//   - [Store.DecrementMany] changes every key or none, locking its keys in one
//     order, so concurrent batches cannot deadlock;
//   - a client that pauses (GC, swap, SIGSTOP) cannot oversell: the database
//     decides, with no gap between deciding and writing;
//   - a refusal says why: *[InsufficientError] ([ErrInsufficient], with the
//     value it read), *[ConflictError] ([ErrConflict]) or [ErrNotFound].
//     Bad input is [ErrInvalid], before anything is sent.
//
// What it does NOT protect:
//   - a change that must also touch other rows or systems, unless the caller
//     runs them in one transaction ([Postgres.WithDB]);
//   - a call whose reply is lost: it may have applied, and a retry may apply
//     it twice. Give it an ID ([WithID], minted once per intent): a retry
//     then returns the first outcome, and [Recorder.Resolve] tells whether
//     it applied;
//   - invariants across rows beyond one batch.
//
// [Postgres] works on the user's own table, [Memory] in one process, and
// [Fenced] does the same the lock-based way, for comparison; the suite in
// atomic/atomictest checks all three. On a hot key, a [Coalescer] sends
// the operations waiting in this process as one step ([InOrder]).
// docs/atomic.md has the failure modes, IDs, operations and costs.
//
// A file that also uses sync/atomic imports this package under another name:
//
//	import lfatomic "github.com/lockfree-go/lockfree/atomic"
package atomic

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
)

var (
	// ErrInsufficient reports a decrement below the floor or an increment
	// above the cap; the error is an *InsufficientError with the current value.
	ErrInsufficient = errors.New("atomic: insufficient value")
	// ErrConflict reports a compare-and-set whose expected value did not
	// match, a set-if-greater whose value was not greater, or a claim of a key
	// that exists; the error is a *ConflictError with the current value.
	ErrConflict = errors.New("atomic: value conflict")
	// ErrNotFound reports a key that has no row (no counter).
	ErrNotFound = errors.New("atomic: key not found")
	// ErrInvalid reports bad input — an empty, oversized or malformed key, a
	// non-positive amount, an arithmetic overflow, a bad table name —
	// detected before anything was written.
	ErrInvalid = errors.New("atomic: invalid argument")
)

// Operation names, as found in errors.
const (
	OpDecrement     = "decrement"
	OpIncrement     = "increment"
	OpDecrementMany = "decrement many"
	OpCompareAndSet = "compare-and-set"
	OpSetIfGreater  = "set-if-greater"
	OpClaim         = "claim"
)

// MaxKeyLen is the longest key, in bytes. Keys must also be non-empty, valid
// UTF-8 and free of NUL bytes, which PostgreSQL text cannot hold.
const MaxKeyLen = 255

// NoCap is the cap to give Increment when the only limit is int64 itself.
const NoCap = math.MaxInt64

// InsufficientError is a decrement or increment refused because the value
// would cross its bound. Nothing was changed. It matches ErrInsufficient.
type InsufficientError struct {
	Op  string // OpDecrement, OpIncrement or OpDecrementMany
	Key string // the key that was short (for a batch, the first in key order)
	// Actual is the value the store held for Key when it refused.
	Actual int64
	// Amount is what the operation asked to subtract or add.
	Amount int64
	// Bound is the floor (decrements) or the cap (increments).
	Bound int64
}

func (e *InsufficientError) Error() string {
	if e.Op == OpIncrement {
		return fmt.Sprintf("atomic: %s %s by %d: value %d would exceed cap %d", e.Op, short.Quote(e.Key), e.Amount, e.Actual, e.Bound)
	}
	return fmt.Sprintf("atomic: %s %s by %d: insufficient value %d (floor %d)", e.Op, short.Quote(e.Key), e.Amount, e.Actual, e.Bound)
}

// Is reports whether target is ErrInsufficient.
func (e *InsufficientError) Is(target error) bool { return target == ErrInsufficient }

// ConflictError is a compare-and-set, set-if-greater or claim refused
// because of the key's current value. Nothing was changed. It matches
// ErrConflict.
type ConflictError struct {
	Op  string // OpCompareAndSet, OpSetIfGreater or OpClaim
	Key string
	// Expected is the caller's side of the comparison: the old value a
	// compare-and-set expected, the value a set-if-greater expected to be
	// greater, or the value a claim offered.
	Expected int64
	// Actual is the value the store held for Key when it refused.
	Actual int64
}

func (e *ConflictError) Error() string {
	switch e.Op {
	case OpClaim:
		return fmt.Sprintf("atomic: claim %s: already claimed (value %d)", short.Quote(e.Key), e.Actual)
	case OpSetIfGreater:
		return fmt.Sprintf("atomic: set-if-greater %s: %d is not greater than %d", short.Quote(e.Key), e.Expected, e.Actual)
	}
	return fmt.Sprintf("atomic: %s %s: expected %d, found %d", e.Op, short.Quote(e.Key), e.Expected, e.Actual)
}

// Is reports whether target is ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Store is the contract shared by Postgres, Memory and Fenced. Every method
// is safe for concurrent use, changes its key(s) entirely or not at all, and
// returns ErrInvalid for bad input before writing anything. An operation
// given WithID is recorded with its outcome, and a retry with the ID returns
// that outcome instead of applying again (Recorder; Fenced records nothing
// and refuses an ID with ErrInvalid).
type Store interface {
	// Decrement subtracts amount (> 0) from key's value if the result stays
	// at or above the store's floor, and returns the new value. Otherwise it
	// returns an *InsufficientError (ErrInsufficient) with the current value,
	// or ErrNotFound.
	Decrement(ctx context.Context, key string, amount int64, opts ...Option) (remaining int64, err error)
	// Increment adds amount (> 0) to key's value if the result stays at or
	// below limit (NoCap for none), and returns the new value. Otherwise it
	// returns an *InsufficientError, or ErrNotFound; ErrInvalid when the sum
	// would overflow int64.
	Increment(ctx context.Context, key string, amount, limit int64, opts ...Option) (value int64, err error)
	// CompareAndSet sets key's value to next if it is old, or returns a
	// *ConflictError (ErrConflict) with the current value, or ErrNotFound.
	CompareAndSet(ctx context.Context, key string, old, next int64, opts ...Option) error
	// SetIfGreater sets key's value to value if value is greater than the
	// current one (a high-water mark), or returns a *ConflictError, or
	// ErrNotFound.
	SetIfGreater(ctx context.Context, key string, value int64, opts ...Option) error
	// Claim creates key with value if it does not exist, once: every later
	// claim returns a *ConflictError with the value it found.
	Claim(ctx context.Context, key string, value int64, opts ...Option) error
	// DecrementMany subtracts each amount from its key if every result stays
	// at or above the floor, and returns the new values; otherwise it changes
	// nothing and returns an *InsufficientError or ErrNotFound naming the
	// first failing key in key order. Keys are locked in sorted order, so
	// concurrent batches over overlapping keys cannot deadlock.
	DecrementMany(ctx context.Context, amounts map[string]int64, opts ...Option) (remaining map[string]int64, err error)
	// Value returns key's value, or ErrNotFound.
	Value(ctx context.Context, key string) (int64, error)
}

func validKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key %s is %d bytes, longer than %d", ErrInvalid, short.Quote(key), len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key %s is not valid UTF-8", ErrInvalid, short.Quote(key))
	}
	for i := 0; i < len(key); i++ {
		if key[i] == 0 {
			return fmt.Errorf("%w: key %s contains a NUL byte", ErrInvalid, short.Quote(key))
		}
	}
	return nil
}

func validAmount(key string, amount int64) error {
	if amount <= 0 {
		return fmt.Errorf("%w: amount %d for %s is not positive", ErrInvalid, amount, short.Quote(key))
	}
	return nil
}

// decrementThreshold returns the lowest value from which amount can be taken
// without crossing floor: floor + amount, or ErrInvalid if that overflows.
func decrementThreshold(key string, amount, floor int64) (int64, error) {
	if err := validKey(key); err != nil {
		return 0, err
	}
	if err := validAmount(key, amount); err != nil {
		return 0, err
	}
	if floor > 0 && amount > math.MaxInt64-floor {
		return 0, fmt.Errorf("%w: floor %d + amount %d overflows int64", ErrInvalid, floor, amount)
	}
	return floor + amount, nil
}

// incrementCeiling returns the highest value to which amount can be added
// without crossing limit: limit - amount, or ErrInvalid if that overflows.
func incrementCeiling(key string, amount, limit int64) (int64, error) {
	if err := validKey(key); err != nil {
		return 0, err
	}
	if err := validAmount(key, amount); err != nil {
		return 0, err
	}
	if limit < math.MinInt64+amount {
		return 0, fmt.Errorf("%w: cap %d - amount %d overflows int64", ErrInvalid, limit, amount)
	}
	return limit - amount, nil
}

// incrementMiss is the error for an increment refused at current: an
// overflow (ErrInvalid) when current + amount leaves int64, otherwise an
// *InsufficientError.
func incrementMiss(key string, amount, limit, current int64) error {
	if current > math.MaxInt64-amount {
		return fmt.Errorf("%w: increment %s: %d + %d overflows int64", ErrInvalid, short.Quote(key), current, amount)
	}
	return &InsufficientError{Op: OpIncrement, Key: key, Actual: current, Amount: amount, Bound: limit}
}

// A decision is what the memory backend (under its mutex) and the fenced
// twin (under its lease) decide in Go about a value they read apart from
// their write, where the PostgreSQL backend decides in its statement: the
// new value, or the refusal. Each condition is a mutant site
// (internal/failpoint): an unsafe variant that the tests guarding the
// condition must catch.
type decision func(v int64) (next int64, err error)

// decrement validates a Decrement and returns its decision: take amount
// unless that crosses floor.
func decrement(key string, amount, floor int64) (decision, error) {
	threshold, err := decrementThreshold(key, amount, floor)
	if err != nil {
		return nil, err
	}
	return func(v int64) (int64, error) {
		if !failpoint.Mutant("atomic.decrement.floor") && v < threshold {
			return 0, &InsufficientError{Op: OpDecrement, Key: key, Actual: v, Amount: amount, Bound: floor}
		}
		return v - amount, nil
	}, nil
}

// increment validates an Increment and returns its decision: add amount
// unless that crosses limit.
func increment(key string, amount, limit int64) (decision, error) {
	ceiling, err := incrementCeiling(key, amount, limit)
	if err != nil {
		return nil, err
	}
	return func(v int64) (int64, error) {
		if !failpoint.Mutant("atomic.increment.cap") && v > ceiling {
			return 0, incrementMiss(key, amount, limit, v)
		}
		return v + amount, nil
	}, nil
}

// compareAndSet validates a CompareAndSet and returns its decision: next
// if the value is old.
func compareAndSet(key string, old, next int64) (decision, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	return func(v int64) (int64, error) {
		if !failpoint.Mutant("atomic.cas.compare") && v != old {
			return 0, &ConflictError{Op: OpCompareAndSet, Key: key, Expected: old, Actual: v}
		}
		return next, nil
	}, nil
}

// setIfGreater validates a SetIfGreater and returns its decision: value if
// it is greater.
func setIfGreater(key string, value int64) (decision, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	return func(v int64) (int64, error) {
		if !failpoint.Mutant("atomic.setifgreater.compare") && value <= v {
			return 0, &ConflictError{Op: OpSetIfGreater, Key: key, Expected: value, Actual: v}
		}
		return value, nil
	}, nil
}

// batch is a validated DecrementMany request in key order.
type batch struct {
	keys       []string
	amounts    []int64
	thresholds []int64
}

func newBatch(amounts map[string]int64, floor int64) (batch, error) {
	if len(amounts) == 0 {
		return batch{}, fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	b := batch{keys: make([]string, 0, len(amounts))}
	for k := range amounts {
		b.keys = append(b.keys, k)
	}
	slices.SortFunc(b.keys, cmp.Compare)
	for _, k := range b.keys {
		th, err := decrementThreshold(k, amounts[k], floor)
		if err != nil {
			return batch{}, err
		}
		b.amounts = append(b.amounts, amounts[k])
		b.thresholds = append(b.thresholds, th)
	}
	return b, nil
}

func notFound(key string) error { return fmt.Errorf("%w: %s", ErrNotFound, short.Quote(key)) }
