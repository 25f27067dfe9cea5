package idempotency

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// MemoryConfig configures a Memory store. A nil *MemoryConfig means the
// defaults.
type MemoryConfig struct {
	// Clock decides expiry; tests pass a *clock.Manual and move it instead
	// of sleeping. Leases are still timed locally on the monotonic clock,
	// and the bounded wait of Do on real time. Defaults to clock.System().
	Clock clock.Clock
	// Retention is how long a key is remembered and its result replayed,
	// counted from its completion; at least 1ms. Defaults to 24h.
	Retention time.Duration
	// TombstoneRetention is how long a purged key stays spent after its
	// retention ended. Defaults to 7 days.
	TombstoneRetention time.Duration
	// InFlightWait bounds how long a duplicate of an execution in flight
	// waits for it in Do before it gets ErrInFlight; at least 1ms. Defaults
	// to 2s.
	InFlightWait time.Duration
	// RetryAfter is the retry hint of Do's InFlightError. Defaults to 1s.
	RetryAfter time.Duration
	// MeterProvider receives the metrics of Do (docs/idempotency.md,
	// "Metrics"). Defaults to none: nothing is recorded.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span for each Do. Defaults to none.
	TracerProvider trace.TracerProvider
}

func (c *MemoryConfig) withDefaults() MemoryConfig {
	var d MemoryConfig
	if c != nil {
		d = *c
	}
	if d.Clock == nil {
		d.Clock = clock.System()
	}
	k := d.keeping().withDefaults()
	d.Retention, d.TombstoneRetention, d.InFlightWait, d.RetryAfter = k.Retention, k.TombstoneRetention, k.InFlightWait, k.RetryAfter
	return d
}

func (c MemoryConfig) keeping() keeping {
	return keeping{c.Retention, c.TombstoneRetention, c.InFlightWait, c.RetryAfter}
}

func (c MemoryConfig) validate() error { return c.keeping().validate() }

// Memory keeps idempotency records in this process's memory: the same
// contract as Postgres — transactional-mode Do, leased mode (LeaseStore),
// the twin's records (FencedStore), Lookup and Purge — for tests and
// single-process programs. Expiry follows its Clock. It is safe for
// concurrent use; the zero value is not usable: call NewMemory. Its tokens
// need no fence eras: a process's memory has no replica to fail over to.
type Memory struct {
	clock clock.Clock
	cfg   MemoryConfig
	tel   *execTelemetry

	mu   sync.Mutex
	recs map[Key]*memRecord
	next int64 // last token handed out, for every key (like the sequence)
}

type memRecord struct {
	fp           Fingerprint
	state        string // "running", "done", "tombstone"
	token        int64
	leaseExpires time.Time
	recovery     string
	result       Result
	expires      time.Time
	// done is set while a Do (transactional mode) runs the key, and closed
	// when it commits or rolls back: the memory twin of waiting for the
	// key's lock.
	done chan struct{}
}

// NewMemory returns an empty store. A nil cfg means the defaults; a bad one
// gives an error matching ErrInvalid.
func NewMemory(cfg *MemoryConfig) (*Memory, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Memory{clock: c.Clock, cfg: c, recs: map[Key]*memRecord{}, tel: newTelemetry(c.MeterProvider, c.TracerProvider, "transactional")}, nil
}

func copyResult(r Result) Result {
	return Result{Status: r.Status, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}
}

// record returns key's record as the outside sees it. The caller holds m.mu.
func (m *Memory) record(key Key, r *memRecord) Record {
	now := m.clock.Now()
	rec := Record{Key: key, Fingerprint: r.fp, Token: r.token, RecoveryPoint: r.recovery,
		LeaseExpires: r.leaseExpires, Expires: r.expires}
	if left := r.leaseExpires.Sub(now); left > 0 {
		rec.leaseLeft = left
	}
	switch {
	case r.state == "tombstone":
		rec.State = Expired
	case r.state == "running" && (r.done != nil || now.Before(r.leaseExpires)):
		rec.State = Running
	case !now.Before(r.expires):
		rec.State = Expired
	case r.state == "done":
		rec.State = Done
		rec.Result = copyResult(r.result)
	default:
		rec.State = Running
	}
	return rec
}

// Do implements Executor in transactional mode: the key is claimed for the
// duration of fn, a duplicate waits up to InFlightWait for it, and an error
// (or panic) from fn removes the claim so that a retry runs again.
func (m *Memory) Do(ctx context.Context, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (done Result, err error) {
	ctx, exec := m.tel.start(ctx)
	defer func() { exec.end(ctx, done, err) }()
	if err := key.Validate(); err != nil {
		return Result{}, err
	}
	r, replay, err := m.claimDo(ctx, key, fp)
	if err != nil || replay != nil {
		if replay != nil {
			return *replay, nil
		}
		return Result{}, err
	}
	committed := false
	defer func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !committed && m.recs[key] == r {
			delete(m.recs, key) // the rollback: no trace
		}
		close(r.done)
		r.done = nil
	}()
	res, err := fn(ctx)
	if err != nil {
		return Result{}, err
	}
	res.Replayed = false
	failpoint.Inject(ctx, "idempotency.memory.before-write")
	m.mu.Lock()
	r.state, r.result, r.expires = "done", copyResult(res), m.clock.Now().Add(m.cfg.Retention)
	committed = true
	m.mu.Unlock()
	return res, nil
}

// claimDo claims key for Do, waiting (bounded) while another Do runs it: a
// new record, or the stored result, or an error.
func (m *Memory) claimDo(ctx context.Context, key Key, fp Fingerprint) (*memRecord, *Result, error) {
	var timeout <-chan time.Time
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		m.mu.Lock()
		cur := m.recs[key]
		if cur == nil || failpoint.Mutant("idempotency.claim.conflict") ||
			(cur.done != nil && failpoint.Mutant("idempotency.claim.in-flight")) {
			r := &memRecord{fp: fp, state: "running", expires: m.clock.Now().Add(m.cfg.Retention), done: make(chan struct{})}
			m.recs[key] = r
			m.mu.Unlock()
			return r, nil, nil
		}
		if cur.done == nil || cur.fp != fp {
			rec := m.record(key, cur)
			m.mu.Unlock()
			res, err := classify(rec, fp, m.cfg.RetryAfter)
			return nil, res, err
		}
		wait := cur.done
		m.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(m.cfg.InFlightWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-wait:
		case <-timeout:
			return nil, nil, &InFlightError{Key: key, RetryAfter: m.cfg.RetryAfter}
		case <-ctx.Done():
			return nil, nil, context.Cause(ctx)
		}
	}
}

// Claim implements LeaseStore.
func (m *Memory) Claim(ctx context.Context, key Key, fp Fingerprint, ttl time.Duration) (Lease, *Result, error) {
	if err := validClaim(key, ttl); err != nil {
		return Lease{}, nil, err
	}
	if err := ctx.Err(); err != nil {
		return Lease{}, nil, err
	}
	sent := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	cur := m.recs[key]
	if cur == nil {
		cur = &memRecord{fp: fp, state: "running", expires: now.Add(m.cfg.Retention)}
		m.recs[key] = cur
	} else if !m.takeable(key, cur, fp, now) {
		res, err := classify(m.record(key, cur), fp, m.cfg.RetryAfter)
		return Lease{}, res, err
	}
	m.next++
	cur.token, cur.leaseExpires = m.next, now.Add(ttl)
	return Lease{Key: key, Token: cur.token, TTL: ttl, Expires: cur.leaseExpires, RecoveryPoint: cur.recovery, sent: sent}, nil, nil
}

// takeable reports whether a leased attempt may take cur over: a running
// record of the same request, not Do's, whose lease and retention have not
// ended. The caller holds m.mu.
func (m *Memory) takeable(key Key, cur *memRecord, fp Fingerprint, now time.Time) bool {
	rec := m.record(key, cur)
	running := cur.state == "running" && cur.done == nil
	sameRequest := cur.fp == fp || failpoint.Mutant("idempotency.fingerprint")
	notInFlight := !now.Before(cur.leaseExpires) || failpoint.Mutant("idempotency.claim.in-flight")
	notExpired := rec.State != Expired || failpoint.Mutant("idempotency.expired")
	return running && sameRequest && notInFlight && notExpired
}

// current returns key's running record if l's token is still its token, or
// a *SupersededError. The caller holds m.mu.
func (m *Memory) current(l Lease, anyToken bool) (*memRecord, error) {
	cur := m.recs[l.Key]
	if cur == nil {
		return nil, &SupersededError{Key: l.Key, Presented: l.Token}
	}
	if (cur.token != l.Token && !anyToken) || cur.state != "running" {
		return nil, &SupersededError{Key: l.Key, Presented: l.Token, Required: cur.token}
	}
	return cur, nil
}

// Renew implements LeaseStore.
func (m *Memory) Renew(ctx context.Context, l Lease) (Lease, error) {
	if err := validLease(l); err != nil {
		return Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	sent := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, err := m.current(l, false)
	if err != nil {
		return Lease{}, err
	}
	now := m.clock.Now()
	if !now.Before(cur.leaseExpires) {
		return Lease{}, fmt.Errorf("%w: lease %d of %s expired", ErrLeaseLost, l.Token, l.Key)
	}
	cur.leaseExpires = now.Add(l.TTL)
	l.Expires, l.sent = cur.leaseExpires, sent
	return l, nil
}

// Checkpoint implements LeaseStore.
func (m *Memory) Checkpoint(ctx context.Context, l Lease, step string) error {
	if err := validLease(l); err != nil {
		return err
	}
	if err := validStep(step); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, err := m.current(l, false)
	if err != nil {
		return err
	}
	cur.recovery = step
	return nil
}

// Complete implements LeaseStore.
func (m *Memory) Complete(ctx context.Context, l Lease, r Result) error {
	if err := validLease(l); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, err := m.current(l, failpoint.Mutant("idempotency.leased.complete.token"))
	if err != nil {
		return err
	}
	now := m.clock.Now()
	cur.state, cur.result, cur.expires, cur.leaseExpires = "done", copyResult(r), now.Add(m.cfg.Retention), time.Time{}
	return nil
}

// Release implements LeaseStore.
func (m *Memory) Release(ctx context.Context, l Lease) error {
	if err := validLease(l); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, err := m.current(l, failpoint.Mutant("idempotency.leased.release.token"))
	if err != nil {
		return err
	}
	if cur.recovery == "" {
		delete(m.recs, l.Key)
	} else {
		cur.leaseExpires = m.clock.Now()
	}
	return nil
}

// Lookup returns key's record; found is false when there is none.
func (m *Memory) Lookup(ctx context.Context, key Key) (Record, bool, error) {
	if err := key.Validate(); err != nil {
		return Record{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return Record{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.recs[key]
	if cur == nil {
		return Record{}, false, nil
	}
	return m.record(key, cur), true, nil
}

// ReadFenced implements FencedStore.
func (m *Memory) ReadFenced(ctx context.Context, key Key, fp Fingerprint, token int64) (Record, error) {
	if err := validToken(key, token); err != nil {
		return Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.recs[key]
	if cur == nil {
		cur = &memRecord{fp: fp, state: "running", expires: m.clock.Now().Add(m.cfg.Retention)}
		m.recs[key] = cur
	}
	if cur.token > token {
		return Record{}, &fencedlock.FencedError{Presented: token, Required: cur.token}
	}
	if !failpoint.Mutant("idempotency.fenced.read.stamp") {
		cur.token = token
	}
	if cur.state == "running" {
		cur.fp = fp
	}
	return m.record(key, cur), nil
}

// PutFenced implements FencedStore.
func (m *Memory) PutFenced(ctx context.Context, key Key, fp Fingerprint, token int64, r Result) error {
	if err := validToken(key, token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.recs[key]
	if cur != nil && cur.token > token && !failpoint.Mutant("idempotency.fenced.put.token") {
		return &fencedlock.FencedError{Presented: token, Required: cur.token}
	}
	m.recs[key] = &memRecord{fp: fp, state: "done", token: token, result: copyResult(r),
		expires: m.clock.Now().Add(m.cfg.Retention)}
	return nil
}

// DropFenced implements FencedStore.
func (m *Memory) DropFenced(ctx context.Context, key Key, token int64) error {
	if err := validToken(key, token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.recs[key]
	switch {
	case cur == nil:
		return nil
	case cur.token > token:
		return &fencedlock.FencedError{Presented: token, Required: cur.token}
	case cur.token == token && cur.state == "running":
		delete(m.recs, key)
	}
	return nil
}

// Purge turns up to limit expired records into tombstones (dropping their
// results) and then deletes tombstones older than TombstoneRetention, up to
// limit records in all, and returns how many it changed. Call it in a loop
// until it returns less than limit.
func (m *Memory) Purge(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: purge limit %d must be positive", ErrInvalid, limit)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	var n int64
	for _, r := range m.recs {
		if n == int64(limit) {
			return n, nil
		}
		if r.state != "tombstone" && r.done == nil && !now.Before(r.expires) &&
			(r.state != "running" || !now.Before(r.leaseExpires)) {
			r.state, r.result, r.recovery = "tombstone", Result{}, ""
			n++
		}
	}
	for k, r := range m.recs {
		if n == int64(limit) {
			return n, nil
		}
		if r.state == "tombstone" && !now.Before(r.expires.Add(m.cfg.TombstoneRetention)) {
			delete(m.recs, k)
			n++
		}
	}
	return n, nil
}
