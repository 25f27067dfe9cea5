package atomic

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/internal/failpoint"
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
}

func (c *MemoryConfig) withDefaults() MemoryConfig {
	if c == nil {
		return MemoryConfig{}
	}
	return *c
}

// Memory is a Store in this process's memory: a map of counters guarded by
// one mutex, with the same contract and errors as Postgres. It suits tests
// and single-process programs. It is safe for concurrent use; the zero value
// is not usable — call NewMemory.
type Memory struct {
	floor int64
	tel   *storeTelemetry

	mu     sync.Mutex
	values map[string]int64
}

// NewMemory returns an empty store. A nil cfg means the defaults. Every
// MemoryConfig is valid today: the error lets a later option be refused
// without another API change.
func NewMemory(cfg *MemoryConfig) (*Memory, error) {
	c := cfg.withDefaults()
	return &Memory{floor: c.Floor, values: map[string]int64{}, tel: newTelemetry(c.MeterProvider, c.TracerProvider)}, nil
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
func (m *Memory) Decrement(ctx context.Context, key string, amount int64) (_ int64, err error) {
	ctx, op := m.tel.start(ctx, opDecrement)
	defer func() { op.end(ctx, err) }()
	d, err := decrement(key, amount, m.floor)
	if err != nil {
		return 0, err
	}
	return m.update(ctx, key, d)
}

// Increment implements Store.
func (m *Memory) Increment(ctx context.Context, key string, amount, limit int64) (_ int64, err error) {
	ctx, op := m.tel.start(ctx, opIncrement)
	defer func() { op.end(ctx, err) }()
	d, err := increment(key, amount, limit)
	if err != nil {
		return 0, err
	}
	return m.update(ctx, key, d)
}

// CompareAndSet implements Store.
func (m *Memory) CompareAndSet(ctx context.Context, key string, old, next int64) (err error) {
	ctx, op := m.tel.start(ctx, opCompareAndSet)
	defer func() { op.end(ctx, err) }()
	d, err := compareAndSet(key, old, next)
	if err != nil {
		return err
	}
	_, err = m.update(ctx, key, d)
	return err
}

// SetIfGreater implements Store.
func (m *Memory) SetIfGreater(ctx context.Context, key string, value int64) (err error) {
	ctx, op := m.tel.start(ctx, opSetIfGreater)
	defer func() { op.end(ctx, err) }()
	d, err := setIfGreater(key, value)
	if err != nil {
		return err
	}
	_, err = m.update(ctx, key, d)
	return err
}

// Claim implements Store.
func (m *Memory) Claim(ctx context.Context, key string, value int64) (err error) {
	ctx, op := m.tel.start(ctx, opClaim)
	defer func() { op.end(ctx, err) }()
	if err := validKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.values[key]; ok && !failpoint.Mutant("atomic.claim.conflict") { // the mutant overwrites
		return &ConflictError{Op: OpClaim, Key: key, Expected: value, Actual: v}
	}
	m.values[key] = value
	return nil
}

// DecrementMany implements Store. One mutex covers the whole batch, so it
// cannot deadlock either.
func (m *Memory) DecrementMany(ctx context.Context, amounts map[string]int64) (_ map[string]int64, err error) {
	ctx, op := m.tel.start(ctx, opDecrementMany)
	defer func() { op.end(ctx, err) }()
	b, err := newBatch(amounts, m.floor)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The mutant takes key by key, so that a short key leaves the keys
	// before it taken: not all or nothing.
	eager := failpoint.Mutant("atomic.decrementmany.all")
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, k := range b.keys {
		v, ok := m.values[k]
		switch {
		case !ok:
			return nil, notFound(k)
		case v < b.thresholds[i]:
			return nil, &InsufficientError{Op: OpDecrementMany, Key: k, Actual: v, Amount: b.amounts[i], Bound: m.floor}
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
	return out, nil
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
