package partition

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Clock tells the time. [Memory] takes one so that tests can move time
// forward instead of sleeping; time.Now is the default.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Memory is the membership store in this process's memory, for several
// members in one process (tests, simulations). Expiry follows its Clock. It
// is safe for concurrent use. The zero value is not usable; call NewMemory.
type Memory struct {
	clock Clock

	// mu guards owners; Verify holds it for reading while its function
	// runs, so a claim (which writes) waits for the write to finish.
	mu     sync.RWMutex
	owners map[int]Epoch

	mmu         sync.Mutex // guards members and incarnation; taken after mu
	members     map[string]*memMember
	incarnation int64
}

type memMember struct {
	info    MemberInfo
	expires time.Time
}

// NewMemory returns an empty store; a nil clock means the system clock.
func NewMemory(clock Clock) *Memory {
	if clock == nil {
		clock = systemClock{}
	}
	return &Memory{clock: clock, owners: map[int]Epoch{}, members: map[string]*memMember{}}
}

// live returns the member row of name if its lease is live. The caller holds
// mmu.
func (s *Memory) live(name string) *memMember {
	m := s.members[name]
	if m == nil || !s.clock.Now().Before(m.expires) {
		return nil
	}
	return m
}

// lease returns the live member row of (name, incarnation). The caller holds
// mmu.
func (s *Memory) lease(name string, incarnation int64) (*memMember, error) {
	if err := validLease(name, incarnation); err != nil {
		return nil, err
	}
	m := s.live(name)
	if m == nil || m.info.Incarnation != incarnation {
		return nil, fmt.Errorf("%w: %q incarnation %d", ErrExpired, name, incarnation)
	}
	return m, nil
}

// Join implements Membership.
func (s *Memory) Join(ctx context.Context, m MemberInfo, ttl time.Duration) (MemberInfo, error) {
	if err := validJoin(m, ttl); err != nil {
		return MemberInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return MemberInfo{}, err
	}
	s.mmu.Lock()
	defer s.mmu.Unlock()
	if cur := s.live(m.Name); cur != nil {
		return MemberInfo{}, fmt.Errorf("%w: %q (incarnation %d)", ErrNameInUse, m.Name, cur.info.Incarnation)
	}
	s.incarnation++
	m.Incarnation, m.Leaving = s.incarnation, false
	s.members[m.Name] = &memMember{info: m, expires: s.clock.Now().Add(ttl)}
	return m, nil
}

// Heartbeat implements Membership.
func (s *Memory) Heartbeat(ctx context.Context, name string, incarnation int64, ttl time.Duration) error {
	if err := validTTL(ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mmu.Lock()
	defer s.mmu.Unlock()
	m, err := s.lease(name, incarnation)
	if err != nil {
		return err
	}
	m.expires = s.clock.Now().Add(ttl)
	return nil
}

// SetLeaving implements Membership.
func (s *Memory) SetLeaving(ctx context.Context, name string, incarnation int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mmu.Lock()
	defer s.mmu.Unlock()
	m, err := s.lease(name, incarnation)
	if err != nil {
		return err
	}
	m.info.Leaving = true
	return nil
}

// Leave implements Membership.
func (s *Memory) Leave(ctx context.Context, name string, incarnation int64) error {
	if err := validLease(name, incarnation); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mmu.Lock()
	defer s.mmu.Unlock()
	if m := s.members[name]; m != nil && m.info.Incarnation == incarnation {
		delete(s.members, name)
	}
	return nil
}

// Live implements Membership.
func (s *Memory) Live(ctx context.Context) ([]MemberInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mmu.Lock()
	defer s.mmu.Unlock()
	var out []MemberInfo
	for name := range s.members {
		if m := s.live(name); m != nil {
			out = append(out, m.info)
		}
	}
	slices.SortFunc(out, func(a, b MemberInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Owners implements Membership.
func (s *Memory) Owners(ctx context.Context, partitions int) ([]Epoch, error) {
	if partitions < 1 || partitions > MaxPartitions {
		return nil, fmt.Errorf("%w: partitions %d outside [1, %d]", ErrInvalid, partitions, MaxPartitions)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Epoch, partitions)
	for p := range out {
		out[p] = s.owners[p]
		out[p].Partition = p
	}
	return out, nil
}

// Claim implements Membership.
func (s *Memory) Claim(ctx context.Context, member string, incarnation int64, partitions []int) ([]Epoch, error) {
	if err := validLease(member, incarnation); err != nil {
		return nil, err
	}
	if err := validPartitions(partitions); err != nil {
		return nil, err
	}
	if len(partitions) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mmu.Lock()
	defer s.mmu.Unlock()
	if _, err := s.lease(member, incarnation); err != nil {
		return nil, err
	}
	var out []Epoch
	for _, p := range partitions {
		cur := s.owners[p]
		if cur.Owner != "" && cur.Owner != member && s.live(cur.Owner) != nil {
			continue
		}
		e := Epoch{Partition: p, Owner: member, Token: cur.Token + 1}
		s.owners[p] = e
		out = append(out, e)
	}
	return out, nil
}

// Release implements Membership.
func (s *Memory) Release(ctx context.Context, epochs []Epoch) error {
	for _, e := range epochs {
		if err := validEpoch(e); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, e := range epochs {
		cur := s.owners[e.Partition]
		if cur.Owner != e.Owner || cur.Token != e.Token {
			errs = append(errs, &FencedError{Presented: e, Owner: cur.Owner, Token: cur.Token})
			continue
		}
		cur.Owner = ""
		s.owners[e.Partition] = cur
	}
	return errors.Join(errs...)
}

// Check implements Membership.
func (s *Memory) Check(ctx context.Context, e Epoch) error {
	if err := validEpoch(e); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.check(e)
}

func (s *Memory) check(e Epoch) error {
	cur := s.owners[e.Partition]
	if cur.Owner != e.Owner || cur.Token != e.Token {
		return &FencedError{Presented: e, Owner: cur.Owner, Token: cur.Token}
	}
	return nil
}

// Verify is the fenced write for a resource in memory: it runs fn only if e
// is still its partition's current epoch, and keeps it current until fn
// returns (a claim of the partition waits). It returns fn's error, or a
// *FencedError without running fn. fn must not call the store's Claim or
// Release.
func (s *Memory) Verify(e Epoch, fn func() error) error {
	if err := validEpoch(e); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(e); err != nil {
		return err
	}
	return fn()
}
