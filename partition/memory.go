package partition

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
)

// MemoryConfig configures a Memory store. A nil *MemoryConfig means the
// defaults.
type MemoryConfig struct {
	// Clock decides lease expiry; tests pass a *clock.Manual to move time
	// forward instead of sleeping. Defaults to the system clock.
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

// Memory is the membership store in this process's memory, for several
// members in one process (tests, simulations). Expiry follows its Clock. It
// is safe for concurrent use. The zero value is not usable; call NewMemory.
type Memory struct {
	clock clock.Clock

	// mu guards everything below. It is never held while a user function
	// runs: Verify counts its running functions per partition instead, so
	// the function may call Check (or Verify) without deadlocking against a
	// concurrent Claim.
	mu          sync.Mutex
	owners      map[int]Epoch
	verifying   map[int]int   // running Verify functions per partition
	verifiedCh  chan struct{} // closed, and replaced, when one returns
	members     map[string]*memMember
	incarnation int64
}

type memMember struct {
	info    MemberInfo
	expires time.Time
}

// NewMemory returns an empty store. A nil cfg means the defaults. Every
// MemoryConfig is valid today; the error is there for options to come.
func NewMemory(cfg *MemoryConfig) (*Memory, error) {
	c := cfg.withDefaults()
	return &Memory{
		clock: c.Clock, owners: map[int]Epoch{}, members: map[string]*memMember{},
		verifying: map[int]int{}, verifiedCh: make(chan struct{}),
	}, nil
}

// live returns the member row of name if its lease is live. The caller holds
// mu.
func (s *Memory) live(name string) *memMember {
	m := s.members[name]
	if m == nil || !s.clock.Now().Before(m.expires) {
		return nil
	}
	return m
}

// lease returns the live member row of (name, incarnation). The caller holds
// mu.
func (s *Memory) lease(name string, incarnation int64) (*memMember, error) {
	if err := validLease(name, incarnation); err != nil {
		return nil, err
	}
	m := s.live(name)
	if m == nil || m.info.Incarnation != incarnation {
		return nil, fmt.Errorf("%w: %s incarnation %d", ErrExpired, short.Quote(name), incarnation)
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.live(m.Name); cur != nil && !failpoint.Mutant("partition.join.live") {
		return MemberInfo{}, fmt.Errorf("%w: %s (incarnation %d)", ErrNameInUse, short.Quote(m.Name), cur.info.Incarnation)
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
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.lease(name, incarnation)
	if cur := s.members[name]; err != nil && cur != nil && cur.info.Incarnation == incarnation &&
		failpoint.Mutant("partition.heartbeat.expired") {
		m, err = cur, nil // revives the expired lease
	}
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
	s.mu.Lock()
	defer s.mu.Unlock()
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
	s.mu.Lock()
	defer s.mu.Unlock()
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
	s.mu.Lock()
	defer s.mu.Unlock()
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
	s.mu.Lock()
	defer s.mu.Unlock()
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
	if _, err := s.lease(member, incarnation); err != nil {
		return nil, err
	}
	var out []Epoch
	for _, p := range partitions {
		cur := s.owners[p]
		if cur.Owner != "" && cur.Owner != member && s.live(cur.Owner) != nil && !failpoint.Mutant("partition.claim.owner") {
			continue
		}
		if s.verifying[p] > 0 {
			// A fenced write of the current epoch is running: skip the
			// partition until it returns, as a Postgres claim gives up
			// after LockTimeout; the member claims again at its next step.
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
	// Wait for the fenced writes of the epochs being released, as a
	// Postgres release waits for their share locks.
	for s.verified(epochs) {
		wait := s.verifiedCh
		s.mu.Unlock()
		select {
		case <-wait:
			s.mu.Lock()
		case <-ctx.Done():
			s.mu.Lock()
			return context.Cause(ctx)
		}
	}
	var errs []error
	for _, e := range epochs {
		cur := s.owners[e.Partition]
		if (cur.Owner != e.Owner || cur.Token != e.Token) && !failpoint.Mutant("partition.release.epoch") {
			errs = append(errs, staleEpoch(e, cur))
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if failpoint.Mutant("partition.check.epoch") {
		return nil
	}
	return s.check(e)
}

// check returns nil if e is its partition's current epoch, and a
// *StaleEpochError otherwise. The caller holds mu.
func (s *Memory) check(e Epoch) error {
	cur := s.owners[e.Partition]
	if cur.Owner != e.Owner || cur.Token != e.Token {
		return staleEpoch(e, cur)
	}
	return nil
}

// verified reports whether a Verify function of one of epochs, still
// current, is running. The caller holds mu.
func (s *Memory) verified(epochs []Epoch) bool {
	for _, e := range epochs {
		if s.verifying[e.Partition] > 0 && s.check(e) == nil {
			return true
		}
	}
	return false
}

// Verify is the fenced write for a resource in memory: it runs fn only if e
// is still its partition's current epoch, and keeps it current until fn
// returns — a Claim skips the partition (the member claims it at a later
// step) and a Release of e waits — the equivalent of the share lock that
// Postgres.Verify takes. It returns fn's error, or a *StaleEpochError without
// running fn. No lock of the store is held while fn runs, so fn may call
// Check, Owners or Verify; it must not Release e, which would wait for fn.
func (s *Memory) Verify(e Epoch, fn func() error) error {
	if err := validEpoch(e); err != nil {
		return err
	}
	s.mu.Lock()
	if err := s.check(e); err != nil && !failpoint.Mutant("partition.verify.epoch") {
		s.mu.Unlock()
		return err
	}
	s.verifying[e.Partition]++
	s.mu.Unlock()
	defer s.endVerify(e.Partition)
	return fn()
}

// endVerify counts a Verify function of partition p out and wakes the
// releases waiting for it.
func (s *Memory) endVerify(p int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verifying[p]--
	if s.verifying[p] == 0 {
		delete(s.verifying, p)
	}
	close(s.verifiedCh)
	s.verifiedCh = make(chan struct{})
}
