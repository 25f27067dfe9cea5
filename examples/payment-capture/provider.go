package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/lockfree-go/lockfree/idempotency"
)

// provider is the payment provider, in process. Every call charges the
// customer's card, except a call carrying an idempotency key that the
// provider has seen before: it charges nothing and returns the first call's
// charge, as real providers do with their own idempotency keys (Stripe's
// Idempotency-Key header, Adyen's idempotency-key, …).
type provider struct {
	mu      sync.Mutex
	calls   int
	charges []string          // one charge ID per card charge
	byKey   map[string]string // idempotency key → charge ID
}

// Charge charges amount for pay and returns the charge's ID.
func (p *provider) Charge(ctx context.Context, pay string, amount int64, idempotencyKey string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err // not sent
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if id, ok := p.byKey[idempotencyKey]; ok && idempotencyKey != "" {
		return id, nil
	}
	id := fmt.Sprintf("ch_%d", len(p.charges)+1)
	p.charges = append(p.charges, id)
	if idempotencyKey != "" {
		if p.byKey == nil {
			p.byKey = map[string]string{}
		}
		p.byKey[idempotencyKey] = id
	}
	return id, nil
}

// counts returns the calls the provider received and the charges it made.
func (p *provider) counts() (calls, charges int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls, len(p.charges)
}

// stalling is a LeaseStore whose renewals can be held up, as a paused
// process holds up its own keepalive.
type stalling struct {
	idempotency.LeaseStore
	mu   sync.Mutex
	gate chan struct{} // nil, or closed on resume
}

func (s *stalling) stall() { s.mu.Lock(); s.gate = make(chan struct{}); s.mu.Unlock() }

func (s *stalling) resume() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.mu.Unlock()
}

func (s *stalling) Renew(ctx context.Context, l idempotency.Lease) (idempotency.Lease, error) {
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return idempotency.Lease{}, context.Cause(ctx)
		}
	}
	return s.LeaseStore.Renew(ctx, l)
}

// newWorker returns a worker's leased executor on store, and the store as
// that worker sees it: its renewals stall while the worker is paused.
func newWorker(store idempotency.LeaseStore) (*stalling, *idempotency.Leased, error) {
	s := &stalling{LeaseStore: store}
	exec, err := idempotency.NewLeased(s, &idempotency.LeasedConfig{TTL: ttl})
	return s, exec, err
}
