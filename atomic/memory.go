package atomic

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/opid"
)

// MemoryConfig configures a Memory store. A nil *MemoryConfig means the
// defaults.
type MemoryConfig struct {
	// Floor is the lowest value Decrement and DecrementMany leave behind (a
	// negative floor allows credit). Defaults to 0.
	Floor int64
	// MeterProvider receives the store's metrics (docs/atomic.md,
	// "Metrics"). Defaults to none: nothing is recorded.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span per operation. Defaults to none.
	TracerProvider trace.TracerProvider
	// Clock tells the age of operation IDs (WithID) against Retention.
	// Defaults to the system clock.
	Clock clock.Clock
	// Retention is how long an operation ID is good after the time it
	// carries, as Table.Retention says. At least one second. Defaults to
	// 24 hours.
	Retention time.Duration
}

func (c *MemoryConfig) withDefaults() MemoryConfig {
	var d MemoryConfig
	if c != nil {
		d = *c
	}
	if d.Clock == nil {
		d.Clock = clock.System()
	}
	return d
}

// Memory is a Store in this process's memory: a map of counters guarded by
// one mutex, with the same contract and errors as Postgres. It suits tests
// and single-process programs. It is safe for concurrent use; the zero value
// is not usable — call NewMemory.
type Memory struct {
	floor     int64
	clock     clock.Clock
	retention time.Duration
	tel       *storeTelemetry

	mu     sync.Mutex
	values map[string]int64
	ops    map[uuid.UUID]record // the outcomes of operations with an ID
}

// NewMemory returns an empty store. A nil cfg means the defaults; a
// Retention under one second is ErrInvalid.
func NewMemory(cfg *MemoryConfig) (*Memory, error) {
	c := cfg.withDefaults()
	if err := validRetention(c.Retention); err != nil {
		return nil, err
	}
	return &Memory{floor: c.Floor, clock: c.Clock, retention: retentionOr(c.Retention),
		values: map[string]int64{}, ops: map[uuid.UUID]record{}, tel: newTelemetry(c.MeterProvider, c.TracerProvider)}, nil
}

// where names a Memory in fingerprints: an ID recorded in one is not in
// another.
const memoryWhere = "memory"

// once answers an operation with an ID, m.mu held: with its recorded
// outcome when there is one, otherwise by running apply, which decides
// and writes, and recording what it returns.
func (m *Memory) once(c call, op *started, apply func() record) (Outcome, error) {
	age := opid.AgeOf(c.minted, m.clock.Now(), m.retention)
	if age == opid.Expired && failpoint.Mutant("atomic.id.expired") {
		age = opid.Live
	}
	if age != opid.Live {
		return Outcome{}, ageError(c.id, age)
	}
	if r, ok := m.ops[c.id]; ok && !failpoint.Mutant("atomic.id.replay") {
		op.replayed = true
		return c.replay(r, failpoint.Mutant("atomic.id.fingerprint"))
	}
	r := apply()
	r.minted = c.minted
	m.ops[c.id] = r
	return r.result(c.id), nil
}

// updateOnce is update for an operation with an ID.
func (m *Memory) updateOnce(ctx context.Context, c call, op *started, decide decision) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out, err := m.once(c, op, func() record {
		v, ok := m.values[c.key]
		if !ok {
			return record{fingerprint: c.fingerprint, op: c.op, key: c.key, outcome: recNotFound}
		}
		next, err := decide(v)
		if err != nil {
			return recordOf(c, v, err)
		}
		m.values[c.key] = next
		return recordOf(c, next, nil)
	})
	if err != nil {
		return 0, err
	}
	return out.Value, out.Err
}

// Resolve implements Recorder.
func (m *Memory) Resolve(ctx context.Context, id uuid.UUID) (Outcome, error) {
	minted, err := validID(id)
	if err != nil {
		return Outcome{}, err
	}
	if err := ctx.Err(); err != nil {
		return Outcome{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	age := opid.AgeOf(minted, m.clock.Now(), m.retention)
	if age == opid.Expired && failpoint.Mutant("atomic.id.expired") {
		age = opid.Live
	}
	if age != opid.Live {
		return Outcome{}, ageError(id, age)
	}
	r, ok := m.ops[id]
	if !ok {
		r = record{outcome: recAbandoned, minted: minted}
		if !failpoint.Mutant("atomic.resolve.abandon") { // the mutant leaves the ID free
			m.ops[id] = r
		}
	}
	return r.result(id), nil
}

// Purge implements Recorder, on the store's Clock.
func (m *Memory) Purge(ctx context.Context, limit int) (int, error) {
	if err := validLimit(limit); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	n := 0
	for id, r := range m.ops {
		if n == limit {
			break
		}
		if opid.AgeOf(r.minted, now, m.retention) == opid.Expired || failpoint.Mutant("atomic.purge.expired") {
			delete(m.ops, id)
			n++
		}
	}
	return n, nil
}

// update applies decide to key's value under the mutex and stores the
// value it returns.
func (m *Memory) update(ctx context.Context, key string, decide decision) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.values[key]
	if !ok {
		return 0, notFound(key)
	}
	next, err := decide(v)
	if err != nil {
		return 0, err
	}
	m.values[key] = next
	return next, nil
}

// Decrement implements Store.
func (m *Memory) Decrement(ctx context.Context, key string, amount int64, opts ...Option) (_ int64, err error) {
	ctx, op := m.tel.start(ctx, opDecrement)
	defer func() { op.end(ctx, err) }()
	d, err := decrement(key, amount, m.floor)
	if err != nil {
		return 0, err
	}
	if c, ok, err := newCall(opts, memoryWhere, OpDecrement, key, amount, m.floor, amount); ok || err != nil {
		if err != nil {
			return 0, err
		}
		return m.updateOnce(ctx, c, &op, d)
	}
	return m.update(ctx, key, d)
}

// ApplyInOrder implements InOrder under the store's mutex: the operations
// are decided one after another on the values the last one left, and no
// other operation runs between them.
func (m *Memory) ApplyInOrder(ctx context.Context, ops []Op) ([]Result, error) {
	r, err := newInOrder(ops, m.floor)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	values := make(map[string]int64, len(r.keys))
	for _, k := range r.keys {
		if v, ok := m.values[k]; ok {
			values[k] = v
		}
	}
	for n := range r.sent {
		r.decide(n, values)
	}
	maps.Copy(m.values, values)
	return r.results, nil
}

// Increment implements Store.
func (m *Memory) Increment(ctx context.Context, key string, amount, limit int64, opts ...Option) (_ int64, err error) {
	ctx, op := m.tel.start(ctx, opIncrement)
	defer func() { op.end(ctx, err) }()
	d, err := increment(key, amount, limit)
	if err != nil {
		return 0, err
	}
	if c, ok, err := newCall(opts, memoryWhere, OpIncrement, key, amount, limit, amount, limit); ok || err != nil {
		if err != nil {
			return 0, err
		}
		return m.updateOnce(ctx, c, &op, d)
	}
	return m.update(ctx, key, d)
}

// CompareAndSet implements Store.
func (m *Memory) CompareAndSet(ctx context.Context, key string, old, next int64, opts ...Option) (err error) {
	ctx, op := m.tel.start(ctx, opCompareAndSet)
	defer func() { op.end(ctx, err) }()
	d, err := compareAndSet(key, old, next)
	if err != nil {
		return err
	}
	if c, ok, err := newCall(opts, memoryWhere, OpCompareAndSet, key, old, 0, old, next); ok || err != nil {
		if err != nil {
			return err
		}
		_, err = m.updateOnce(ctx, c, &op, d)
		return err
	}
	_, err = m.update(ctx, key, d)
	return err
}

// SetIfGreater implements Store.
func (m *Memory) SetIfGreater(ctx context.Context, key string, value int64, opts ...Option) (err error) {
	ctx, op := m.tel.start(ctx, opSetIfGreater)
	defer func() { op.end(ctx, err) }()
	d, err := setIfGreater(key, value)
	if err != nil {
		return err
	}
	if c, ok, err := newCall(opts, memoryWhere, OpSetIfGreater, key, value, 0, value); ok || err != nil {
		if err != nil {
			return err
		}
		_, err = m.updateOnce(ctx, c, &op, d)
		return err
	}
	_, err = m.update(ctx, key, d)
	return err
}

// Claim implements Store.
func (m *Memory) Claim(ctx context.Context, key string, value int64, opts ...Option) (err error) {
	ctx, op := m.tel.start(ctx, opClaim)
	defer func() { op.end(ctx, err) }()
	if err := validKey(key); err != nil {
		return err
	}
	c, withID, err := newCall(opts, memoryWhere, OpClaim, key, value, 0, value)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	claim := func() error {
		if v, ok := m.values[key]; ok && !failpoint.Mutant("atomic.claim.conflict") { // the mutant overwrites
			return &ConflictError{Op: OpClaim, Key: key, Expected: value, Actual: v}
		}
		m.values[key] = value
		return nil
	}
	if !withID {
		return claim()
	}
	out, err := m.once(c, &op, func() record {
		if err := claim(); err != nil {
			return recordOf(c, err.(*ConflictError).Actual, err)
		}
		return recordOf(c, value, nil)
	})
	if err != nil {
		return err
	}
	return out.Err
}

// DecrementMany implements Store. One mutex covers the whole batch, so it
// cannot deadlock either.
func (m *Memory) DecrementMany(ctx context.Context, amounts map[string]int64, opts ...Option) (_ map[string]int64, err error) {
	ctx, op := m.tel.start(ctx, opDecrementMany)
	defer func() { op.end(ctx, err) }()
	b, err := newBatch(amounts, m.floor)
	if err != nil {
		return nil, err
	}
	c, withID, err := newCall(opts, memoryWhere, OpDecrementMany, "", 0, m.floor)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !withID {
		out, _, err := m.takeMany(b)
		return out, err
	}
	c.fingerprint = manyFingerprint(memoryWhere, b)
	res, err := m.once(c, &op, func() record {
		out, miss, err := m.takeMany(b)
		r := record{fingerprint: c.fingerprint, op: OpDecrementMany, bound: m.floor, outcome: recApplied}
		var ie *InsufficientError
		switch {
		case errors.As(err, &ie):
			r.outcome, r.key, r.value, r.amount = recInsufficient, ie.Key, ie.Actual, ie.Amount
		case err != nil:
			r.outcome, r.key = recNotFound, miss
		default:
			r.keys = b.keys
			for _, k := range b.keys {
				r.vals = append(r.vals, out[k])
			}
		}
		return r
	})
	if err != nil {
		return nil, err
	}
	return res.Values, res.Err
}

// takeMany takes the batch b, m.mu held, or returns why not: an
// *InsufficientError, or ErrNotFound for the key miss.
func (m *Memory) takeMany(b batch) (_ map[string]int64, miss string, _ error) {
	// The mutant takes key by key, so that a short key leaves the keys
	// before it taken: not all or nothing.
	eager := failpoint.Mutant("atomic.decrementmany.all")
	for i, k := range b.keys {
		v, ok := m.values[k]
		switch {
		case !ok:
			return nil, k, notFound(k)
		case v < b.thresholds[i]:
			return nil, k, &InsufficientError{Op: OpDecrementMany, Key: k, Actual: v, Amount: b.amounts[i], Bound: m.floor}
		}
		if eager {
			m.values[k] = v - b.amounts[i]
		}
	}
	out := make(map[string]int64, len(b.keys))
	for i, k := range b.keys {
		if !eager {
			m.values[k] -= b.amounts[i]
		}
		out[k] = m.values[k]
	}
	return out, "", nil
}

// Value implements Store.
func (m *Memory) Value(ctx context.Context, key string) (int64, error) {
	if err := validKey(key); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.values[key]
	if !ok {
		return 0, notFound(key)
	}
	return v, nil
}
