package idempotency

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// Clock tells the time. Memory takes one so that tests can move time
// forward instead of sleeping; time.Now is the default.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Memory keeps idempotency records in this process's memory: the same
// contract as Postgres — transactional-mode Do, leased mode (LeaseStore) and
// the twin's records (FencedStore) — for tests and single-process programs.
// Expiry follows its Clock; the bounded wait of Do uses real time. It is safe
// for concurrent use. The zero value is not usable; call NewMemory.
type Memory struct {
	clock Clock
	cfg   Config

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
	// when it commits or rolls back: the memory twin of waiting on the
	// unique index.
	done chan struct{}
}

// NewMemory returns an empty store. A nil clock means the system clock; a
// nil cfg means the zero Config.
func NewMemory(clock Clock, cfg *Config) (*Memory, error) {
	if clock == nil {
		clock = systemClock{}
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Memory{clock: clock, cfg: c, recs: map[Key]*memRecord{}}, nil
}

func copyResult(r Result) Result {
	out := Result{Status: r.Status, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}
	return out
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
// duration of fn, a duplicate waits up to Config.InFlightWait for it, and an
// error (or panic) from fn removes the claim so that a retry runs again.
func (m *Memory) Do(ctx context.Context, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (Result, error) {
	if err := key.Validate(); err != nil {
		return Result{}, err
	}
	var timeout <-chan time.Time
	var r *memRecord
	for {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		m.mu.Lock()
		cur := m.recs[key]
		if cur == nil {
			r = &memRecord{fp: fp, state: "running", expires: m.clock.Now().Add(m.cfg.Retention), done: make(chan struct{})}
			m.recs[key] = r
			m.mu.Unlock()
			break
		}
		if cur.done != nil && cur.fp == fp {
			wait := cur.done
			m.mu.Unlock()
			if timeout == nil {
				t := time.NewTimer(m.cfg.InFlightWait)
				defer t.Stop()
				timeout = t.C
			}
			select {
			case <-wait:
				continue
			case <-timeout:
				return Result{}, &InFlightError{Key: key, RetryAfter: m.cfg.RetryAfter}
			case <-ctx.Done():
				return Result{}, context.Cause(ctx)
			}
		}
		rec := m.record(key, cur)
		m.mu.Unlock()
		res, err := classify(rec, fp, m.cfg.RetryAfter)
		if err != nil {
			return Result{}, err
		}
		return *res, nil
	}

	committed := false
	defer func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !committed {
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
	m.mu.Lock()
	r.state, r.result, r.expires = "done", copyResult(res), m.clock.Now().Add(m.cfg.Retention)
	committed = true
	m.mu.Unlock()
	return res, nil
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
	} else if rec := m.record(key, cur); rec.State == Running && cur.done == nil && !now.Before(cur.leaseExpires) && cur.fp == fp {
		// Take over an attempt whose lease expired, keeping its recovery
		// point.
	} else {
		res, err := classify(rec, fp, m.cfg.RetryAfter)
		return Lease{}, res, err
	}
	m.next++
	cur.token, cur.leaseExpires = m.next, now.Add(ttl)
	return Lease{Key: key, Token: cur.token, TTL: ttl, Expires: cur.leaseExpires, RecoveryPoint: cur.recovery, sent: sent}, nil, nil
}

// current returns key's running record if l's token is still its token, or
// a *SupersededError. The caller holds m.mu.
func (m *Memory) current(l Lease) (*memRecord, error) {
	cur := m.recs[l.Key]
	if cur == nil {
		return nil, &SupersededError{Key: l.Key, Presented: l.Token}
	}
	if cur.token != l.Token || cur.state != "running" {
		return nil, &SupersededError{Key: l.Key, Presented: l.Token, Current: cur.token}
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
	cur, err := m.current(l)
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
	cur, err := m.current(l)
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
	cur, err := m.current(l)
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
	cur, err := m.current(l)
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

// Lookup implements FencedStore.
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

// PutFenced implements FencedStore.
func (m *Memory) PutFenced(ctx context.Context, key Key, fp Fingerprint, token int64, r Result) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if token <= 0 {
		return fmt.Errorf("%w: fencing token %d", ErrInvalid, token)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.recs[key]
	if cur != nil && cur.token > token {
		return &fencedlock.FencedError{Presented: token, Required: cur.token}
	}
	m.recs[key] = &memRecord{fp: fp, state: "done", token: token, result: copyResult(r),
		expires: m.clock.Now().Add(m.cfg.Retention)}
	return nil
}

// Purge turns up to limit expired records into tombstones (dropping their
// results) and then deletes tombstones older than Config.TombstoneRetention,
// up to limit records in all, and returns how many it changed. Call it in a
// loop until it returns less than limit.
func (m *Memory) Purge(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: purge limit %d", ErrInvalid, limit)
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
