package atomic

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
)

// ErrUncertain reports an operation whose outcome is unknown: it was sent,
// and the answer did not come back (a lost connection, or the caller's
// context ended while it ran). It may have applied. Ask the store
// (Value), or give the operation an ID on a Store that records them.
var ErrUncertain = errors.New("atomic: outcome unknown")

// MaxInOrder is the most keys one ApplyInOrder step changes or reads,
// counted once per operation (a DecrementManyOp counts its keys).
const MaxInOrder = 1000

// Op is one operation of an ApplyInOrder step. Make it with DecrementOp,
// IncrementOp, CompareAndSetOp, SetIfGreaterOp, DecrementManyOp or ReadOp;
// the zero Op is ErrInvalid.
type Op struct {
	key  string
	kind stepKind
	a, b int64            // DecrementOp: amount; IncrementOp: amount, limit; CompareAndSetOp: old, next; SetIfGreaterOp: value
	many map[string]int64 // DecrementManyOp
}

// stepKind is what an Op does on one key; its numbers are those of the
// fold (migrations/002_apply_in_order.up.sql). A DecrementManyOp is decrements that apply together.
type stepKind int16

const (
	stepDecrement stepKind = iota + 1
	stepIncrement
	stepCompareAndSet
	stepSetIfGreater
	stepRead
	stepDecrementMany // never sent: its keys go as stepDecrement
)

// DecrementOp subtracts amount (> 0) from key's value unless that crosses
// the floor, as Store.Decrement does.
func DecrementOp(key string, amount int64) Op { return Op{key: key, kind: stepDecrement, a: amount} }

// IncrementOp adds amount (> 0) to key's value unless that crosses limit,
// as Store.Increment does.
func IncrementOp(key string, amount, limit int64) Op {
	return Op{key: key, kind: stepIncrement, a: amount, b: limit}
}

// CompareAndSetOp sets key's value to next if it is old, as
// Store.CompareAndSet does.
func CompareAndSetOp(key string, old, next int64) Op {
	return Op{key: key, kind: stepCompareAndSet, a: old, b: next}
}

// SetIfGreaterOp sets key's value to value if that is greater, as
// Store.SetIfGreater does.
func SetIfGreaterOp(key string, value int64) Op {
	return Op{key: key, kind: stepSetIfGreater, a: value}
}

// DecrementManyOp subtracts each amount from its key, all or nothing, as
// Store.DecrementMany does. It keeps a copy of amounts.
func DecrementManyOp(amounts map[string]int64) Op {
	return Op{kind: stepDecrementMany, many: maps.Clone(amounts)}
}

// ReadOp reads key's value at its place in the step.
func ReadOp(key string) Op { return Op{key: key, kind: stepRead} }

// String names the operation, as errors do.
func (o Op) String() string {
	k := short.Quote(o.key)
	switch o.kind {
	case stepDecrement:
		return fmt.Sprintf("%s %s by %d", OpDecrement, k, o.a)
	case stepIncrement:
		return fmt.Sprintf("%s %s by %d (cap %d)", OpIncrement, k, o.a, o.b)
	case stepCompareAndSet:
		return fmt.Sprintf("%s %s %d → %d", OpCompareAndSet, k, o.a, o.b)
	case stepSetIfGreater:
		return fmt.Sprintf("%s %s %d", OpSetIfGreater, k, o.a)
	case stepDecrementMany:
		return fmt.Sprintf("%s of %d keys", OpDecrementMany, len(o.many))
	case stepRead:
		return "read " + k
	}
	return "invalid operation"
}

// size is how many keys the operation counts for against MaxInOrder.
func (o Op) size() int { return max(1, len(o.many)) }

// validate checks what does not depend on the store: the keys, the kind,
// and amounts above zero. The store checks the rest (overflows).
func (o Op) validate() error {
	switch o.kind {
	case stepDecrementMany:
		if len(o.many) == 0 || len(o.many) > MaxInOrder {
			return fmt.Errorf("%w: %s of %d keys, want 1 to %d", ErrInvalid, OpDecrementMany, len(o.many), MaxInOrder)
		}
		for k, a := range o.many {
			if err := validKey(k); err != nil {
				return err
			}
			if err := validAmount(k, a); err != nil {
				return err
			}
		}
		return nil
	case stepDecrement, stepIncrement:
		if err := validKey(o.key); err != nil {
			return err
		}
		return validAmount(o.key, o.a)
	case stepCompareAndSet, stepSetIfGreater, stepRead:
		return validKey(o.key)
	}
	return fmt.Errorf("%w: the zero Op", ErrInvalid)
}

// member is one key's part of a sent operation: a DecrementManyOp has one
// per key, in key order; any other operation one.
type member struct {
	key    string
	decide decision // the Store method's decision on the value it meets
	kind   stepKind // as the fold knows it
	x, y   int64    // its operands in the fold
}

// members validates o against floor and returns its parts.
func (o Op) members(floor int64) ([]member, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	one := func(d decision, x, y int64, err error) ([]member, error) {
		if err != nil {
			return nil, err
		}
		return []member{{key: o.key, decide: d, kind: o.kind, x: x, y: y}}, nil
	}
	switch o.kind {
	case stepDecrement: // decrement refuses a floor + amount that overflows
		d, err := decrement(o.key, o.a, floor)
		return one(d, o.a, floor+o.a, err)
	case stepIncrement: // increment refuses a cap - amount that overflows
		d, err := increment(o.key, o.a, o.b)
		return one(d, o.a, o.b-o.a, err)
	case stepCompareAndSet:
		d, err := compareAndSet(o.key, o.a, o.b)
		return one(d, o.a, o.b, err)
	case stepSetIfGreater:
		d, err := setIfGreater(o.key, o.a)
		return one(d, o.a, 0, err)
	case stepRead:
		return one(func(v int64) (int64, error) { return v, nil }, 0, 0, nil)
	}
	b, err := newBatch(o.many, floor)
	if err != nil {
		return nil, err
	}
	ms := make([]member, len(b.keys))
	for i, k := range b.keys {
		d, err := decrement(k, b.amounts[i], floor)
		if err != nil {
			return nil, err
		}
		ms[i] = member{key: k, decide: d, kind: stepDecrement, x: b.amounts[i], y: b.thresholds[i]}
	}
	return ms, nil
}

// Result is the outcome of one operation of an ApplyInOrder step.
type Result struct {
	// Value is the key's value after this operation when it applied (a
	// read's value), or the value it was refused on.
	Value int64
	// Values are a DecrementManyOp's keys' values after it applied.
	Values map[string]int64
	// Err is nil when the operation applied; otherwise the error the
	// Store's method of the same name returns for it: an
	// *InsufficientError, a *ConflictError, ErrNotFound, or ErrInvalid for
	// a bad operation.
	Err error
}

// InOrder is a store that applies several operations in one atomic step,
// as Postgres (one statement) and Memory (one critical section) do.
type InOrder interface {
	// ApplyInOrder applies ops in their order, each as the Store's method
	// would in a serial execution: an operation whose condition holds on
	// the values it meets applies, any other is refused with them, and the
	// next operation meets what the last one left. It returns one Result
	// per operation, in order. All the step's changes commit together, or
	// none does: an error says so, and matches ErrUncertain when the step
	// may have applied all the same. No operations or more than MaxInOrder
	// keys are ErrInvalid before anything is written; a bad operation is
	// refused alone, in its Result.
	ApplyInOrder(ctx context.Context, ops []Op) ([]Result, error)
}

// inOrder is a validated ApplyInOrder request: the operations that can be
// sent, with their members, and the results of those that cannot.
type inOrder struct {
	ops     []Op
	results []Result
	sent    []int      // indexes of the operations sent, in order
	members [][]member // per operation sent
	keys    []string   // every key sent, once, sorted
}

func newInOrder(ops []Op, floor int64) (inOrder, error) {
	n := 0
	for _, o := range ops {
		n += o.size()
	}
	if len(ops) == 0 || n > MaxInOrder {
		return inOrder{}, fmt.Errorf("%w: %d operations of %d keys in one step, want 1 to %d keys", ErrInvalid, len(ops), n, MaxInOrder)
	}
	r := inOrder{ops: ops, results: make([]Result, len(ops))}
	keys := map[string]bool{}
	for i, o := range ops {
		ms, err := o.members(floor)
		if err != nil {
			r.results[i].Err = err
			continue
		}
		r.sent = append(r.sent, i)
		r.members = append(r.members, ms)
		for _, m := range ms {
			keys[m.key] = true
		}
	}
	r.keys = slices.Sorted(maps.Keys(keys))
	return r, nil
}

// decide applies the n-th operation sent to values (a key without a row
// is not in it) if each of its members' decisions takes the value it
// meets, and records its result.
func (r inOrder) decide(n int, values map[string]int64) {
	if err := r.refusal(n, values); err != nil {
		if failpoint.Mutant("atomic.decrementmany.all") {
			// The members that fit take all the same: not all or nothing.
			for _, m := range r.members[n] {
				if v, ok := values[m.key]; ok {
					if next, err := m.decide(v); err == nil {
						values[m.key] = next
					}
				}
			}
		}
		r.refuse(n, values, err)
		return
	}
	for _, m := range r.members[n] {
		values[m.key], _ = m.decide(values[m.key])
	}
	r.applied(n, values)
}

// applied records the result of the n-th operation sent, which applied
// and left values.
func (r inOrder) applied(n int, values map[string]int64) {
	i, ms := r.sent[n], r.members[n]
	if r.ops[i].kind != stepDecrementMany {
		r.results[i].Value = values[ms[0].key]
		return
	}
	r.results[i].Values = make(map[string]int64, len(ms))
	for _, m := range ms {
		r.results[i].Values[m.key] = values[m.key]
	}
}

// refuse records the refusal of the n-th operation sent: err, with the
// value it was refused on.
func (r inOrder) refuse(n int, values map[string]int64, err error) {
	i := r.sent[n]
	var short *InsufficientError
	if r.ops[i].kind == stepDecrementMany && errors.As(err, &short) {
		e := *short
		e.Op = OpDecrementMany
		err = &e
	}
	r.results[i] = Result{Err: err}
	if r.ops[i].kind != stepDecrementMany {
		r.results[i].Value = values[r.members[n][0].key]
	}
}

// refusal is why the n-th operation sent is refused on values, or nil:
// the first of its members, in key order, whose key has no row or whose
// decision refuses the value it meets.
func (r inOrder) refusal(n int, values map[string]int64) error {
	for _, m := range r.members[n] {
		v, ok := values[m.key]
		if !ok {
			return notFound(m.key)
		}
		if _, err := m.decide(v); err != nil {
			return err
		}
	}
	return nil
}
