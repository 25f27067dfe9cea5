package fencedlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
)

// Memory is the lock service in this process's memory: the same contract as
// Postgres, for tests and single-process programs. Expiry follows its Clock.
// It is safe for concurrent use. The zero value is not usable; call NewMemory.
//
// It keeps an entry per name only while the name is held or recently
// expired: every Acquire of a new name forgets a few expired entries, so one
// name per request (an idempotency key, say) does not grow the store without
// bound; Purge forgets them all. Tokens come from one counter for every name,
// as in PostgreSQL from one sequence, so a forgotten name's next token is
// still larger than all its earlier ones. Its tokens need no fence eras: a
// process's memory has no replica to fail over to.
type Memory struct {
	clock clock.Clock

	mu       sync.Mutex
	locks    map[string]*memLock
	next     int64    // last token handed out, for every name (like the sequence)
	waiters  waitList // Released: woken by releases
	watchers waitList // Changed: woken by grants, values and releases
}

// forgetPerAcquire is how many entries an Acquire of a new name examines
// for expiry: more than the one it adds, so expired entries cannot pile up
// (at most about as many as live ones remain).
const forgetPerAcquire = 2

type memLock struct {
	holder  string
	token   int64
	value   string
	since   time.Time
	expires time.Time
}

// MemoryConfig configures a Memory store. A nil *MemoryConfig means the
// defaults.
type MemoryConfig struct {
	// Clock decides expiry; tests pass a *clock.Manual and move it
	// instead of sleeping. Leases are still timed locally on the monotonic
	// clock (Lease.SafeUntil, Keepalive). Defaults to clock.System().
	Clock clock.Clock
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

// NewMemory returns an empty store. A nil cfg means the defaults. It
// returns an error only for a config it cannot use: none today.
func NewMemory(cfg *MemoryConfig) (*Memory, error) {
	c := cfg.withDefaults()
	return &Memory{clock: c.Clock, locks: map[string]*memLock{}}, nil
}

// Acquire implements Store.
func (m *Memory) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	return m.AcquireValue(ctx, name, holder, ttl, "")
}

// AcquireValue implements ValueStore.
func (m *Memory) AcquireValue(ctx context.Context, name, holder string, ttl time.Duration, value string) (Lease, error) {
	if err := validAcquire(name, holder, ttl); err != nil {
		return Lease{}, err
	}
	if err := ValidValue(value); err != nil {
		return Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	sent := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.free(name); err != nil {
		return Lease{}, err
	}
	return m.grant(name, holder, ttl, value, sent), nil
}

// free returns a *HeldError when name is held. The caller holds m.mu.
func (m *Memory) free(name string) error {
	if l := m.unexpired(m.locks[name]); l != nil && !failpoint.Mutant("fencedlock.acquire.expired") {
		return &HeldError{Name: name, Holder: l.holder, Token: l.token}
	}
	return nil
}

// grant gives name to holder with the next token. The caller holds m.mu and
// found name free.
func (m *Memory) grant(name, holder string, ttl time.Duration, value string, sent time.Time) Lease {
	now := m.clock.Now()
	prev := m.locks[name]
	if prev == nil {
		m.forget(now, forgetPerAcquire, 0)
	}
	if prev != nil && value == "" && failpoint.Mutant("fencedlock.acquire.clear-value") {
		value = prev.value // the previous tenure's value carries over
	}
	m.next++
	l := &memLock{holder: holder, token: m.next, value: value, since: now, expires: now.Add(ttl)}
	m.locks[name] = l
	m.watchers.wake(name)
	return Lease{Name: name, Holder: holder, Token: l.token, TTL: ttl, Expires: l.expires, Value: value, sent: sent}
}

// AcquireAll implements MultiStore: under the store's lock, every name is
// checked, then every one granted, in sorted order.
func (m *Memory) AcquireAll(ctx context.Context, names []string, holder string, ttl time.Duration) ([]Lease, error) {
	order, err := validAcquireAll(names, holder, ttl)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sent := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, i := range order {
		if err := m.free(names[i]); err != nil && !failpoint.Mutant("fencedlock.acquireall.atomic") {
			return nil, err
		}
	}
	leases := make([]Lease, len(names))
	for _, i := range order {
		if err := m.free(names[i]); err != nil {
			return nil, err // under the mutant only: the names before it stay granted
		}
		leases[i] = m.grant(names[i], holder, ttl, "", sent)
	}
	return leases, nil
}

// current returns the lock row for lease if lease is its unexpired tenure.
// The caller holds m.mu.
func (m *Memory) current(l Lease) *memLock {
	c := m.unexpired(m.locks[l.Name])
	if c == nil || c.holder != l.Holder || c.token != l.Token {
		return nil
	}
	return c
}

// renewable returns the lock row for a renewal of lease, as current does;
// the mutant sites let a test see what each condition guards.
func (m *Memory) renewable(l Lease) *memLock {
	c := m.locks[l.Name]
	switch {
	case c == nil || failpoint.Mutant("fencedlock.renew.tenure"):
		return m.unexpired(c)
	case c.holder != l.Holder || c.token != l.Token:
		return nil
	case failpoint.Mutant("fencedlock.renew.expired"):
		return c
	}
	return m.unexpired(c)
}

// unexpired returns c if it is a lock that has not expired. The caller
// holds m.mu.
func (m *Memory) unexpired(c *memLock) *memLock {
	if c == nil || !m.clock.Now().Before(c.expires) {
		return nil
	}
	return c
}

// Renew implements Store.
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
	c := m.renewable(l)
	if c == nil {
		return Lease{}, fmt.Errorf("%w: renew %s token %d", ErrNotHeld, short.Quote(l.Name), l.Token)
	}
	c.expires = m.clock.Now().Add(l.TTL)
	l.Expires, l.sent = c.expires, sent
	return l, nil
}

// SetValue implements ValueStore.
func (m *Memory) SetValue(ctx context.Context, l Lease, value string) (Lease, error) {
	if err := validLease(l); err != nil {
		return Lease{}, err
	}
	if err := ValidValue(value); err != nil {
		return Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.current(l)
	if failpoint.Mutant("fencedlock.value.tenure") {
		c = m.unexpired(m.locks[l.Name])
	}
	if c == nil {
		return Lease{}, fmt.Errorf("%w: set value of %s token %d", ErrNotHeld, short.Quote(l.Name), l.Token)
	}
	c.value = value
	m.watchers.wake(l.Name)
	l.Value = value
	return l, nil
}

// Release implements Store and wakes the waiters of the lock.
func (m *Memory) Release(ctx context.Context, l Lease) error {
	if err := validTenure(l); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.current(l)
	if failpoint.Mutant("fencedlock.release.tenure") {
		c = m.unexpired(m.locks[l.Name])
	}
	if c == nil {
		return fmt.Errorf("%w: release %s token %d", ErrNotHeld, short.Quote(l.Name), l.Token)
	}
	c.expires = m.clock.Now()
	m.waiters.wake(l.Name)
	m.watchers.wake(l.Name)
	return nil
}

// Holder implements Store.
func (m *Memory) Holder(ctx context.Context, name string) (Lease, bool, error) {
	if err := validName("lock name", name); err != nil {
		return Lease{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return Lease{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.unexpired(m.locks[name])
	if c == nil {
		return Lease{}, false, nil
	}
	return c.lease(name), true, nil
}

// lease is the Lease of c as Holder reports it: no TTL, no send time.
func (c *memLock) lease(name string) Lease {
	return Lease{Name: name, Holder: c.holder, Token: c.token, Expires: c.expires, Value: c.value}
}

// List implements Lister.
func (m *Memory) List(ctx context.Context, q ListQuery) (Page, error) {
	q = q.withDefaults()
	if err := q.validate(); err != nil {
		return Page{}, err
	}
	if err := ctx.Err(); err != nil {
		return Page{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := Page{Now: m.clock.Now()}
	for name, c := range m.locks {
		if strings.HasPrefix(name, q.Prefix) && name > q.After && m.unexpired(c) != nil {
			p.Locks = append(p.Locks, Holding{Lease: c.lease(name), Since: c.since})
		}
	}
	slices.SortFunc(p.Locks, func(a, b Holding) int { return strings.Compare(a.Name, b.Name) })
	if len(p.Locks) > q.Limit {
		p.Locks = p.Locks[:q.Limit]
		p.Next = p.Locks[q.Limit-1].Name
	}
	return p, nil
}

// Purge forgets up to limit locks that expired more than olderThan ago and
// returns how many it forgot, like Postgres.Purge. Acquire already forgets
// expired locks as it goes, so Purge is optional: call it from the process
// that owns the store (a periodic goroutine, or a test) to free memory at
// once after a burst of names. Tokens stay monotonic.
func (m *Memory) Purge(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	if olderThan < 0 || limit <= 0 {
		return 0, fmt.Errorf("%w: purge olderThan %v limit %d", ErrInvalid, olderThan, limit)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.forget(m.clock.Now().Add(-olderThan), len(m.locks), limit), nil
}

// forget examines up to examine entries and deletes those that expired
// before cutoff, at most limit of them (0: no limit). It returns how many it
// deleted. The caller holds m.mu.
func (m *Memory) forget(cutoff time.Time, examine, limit int) int64 {
	var n int64
	for name, l := range m.locks {
		if examine == 0 || (limit > 0 && n == int64(limit)) {
			break
		}
		examine--
		if l.expires.Before(cutoff) {
			delete(m.locks, name)
			n++
		}
	}
	return n
}

// Released implements Wakeups: the channel is closed at the next release of
// name. Expiry does not close it; waiters also poll.
func (m *Memory) Released(name string) (<-chan struct{}, func()) { return m.waiters.add(name) }

// Changed implements Watcher: the channel is closed at the next grant
// (Acquire as well as AcquireValue), SetValue or release of name. Expiry
// does not close it; watchers also poll.
func (m *Memory) Changed(name string) (<-chan struct{}, func()) { return m.watchers.add(name) }

// Gate is the resource-side fencing check for a resource in memory: it
// admits a token at least as high as the highest it has admitted, and rejects
// lower ones with a *FencedError. The zero Gate is ready to use and admits
// every positive token; it is safe for concurrent use.
type Gate struct {
	mu      sync.Mutex
	highest int64
}

// Do runs fn under the gate if token is not stale, and raises the gate to
// token when fn succeeds (like a fenced UPDATE, which records its token only
// when it changes the row). Calls are serialised, so fn may update the
// resource without further locking. It returns fn's error, or a *FencedError
// without running fn.
func (g *Gate) Do(token int64, fn func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if token < g.highest && !failpoint.Mutant("fencedlock.gate.compare") {
		return &FencedError{Presented: token, Required: g.highest}
	}
	if err := fn(); err != nil {
		return err
	}
	g.highest = token
	return nil
}

// Highest returns the highest token the gate has admitted.
func (g *Gate) Highest() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.highest
}
