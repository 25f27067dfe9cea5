package main

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/partition"
)

// fleet is the members a and b, in one process. Every membership call of a
// member goes through its own freezer, so the scenario can freeze one
// member's heartbeats as a process pause would.
type fleet struct {
	members map[string]*partition.Member
	frozen  map[string]*freezer
}

// startFleet starts the members a and b on store.
func startFleet(ctx context.Context, store partition.Membership) (*fleet, error) {
	frozen := map[string]*freezer{"a": {Membership: store}, "b": {Membership: store}}
	f := &fleet{members: map[string]*partition.Member{}, frozen: frozen}
	for _, name := range []string{"a", "b"} {
		m, err := partition.NewMember(frozen[name], &partition.Config{Name: name, TTL: ttl})
		if err != nil {
			f.stop(ctx)
			return nil, err
		}
		if err := m.Start(ctx); err != nil { // joins the fleet and claims its partitions
			f.stop(ctx)
			return nil, err
		}
		f.members[name] = m
	}
	return f, nil
}

// stop thaws and stops the members.
func (f *fleet) stop(ctx context.Context) {
	for name, m := range f.members {
		f.frozen[name].thaw()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		m.Stop(cctx)
		cancel()
	}
}

// expire pauses the process of e's owner: no heartbeats. It returns once
// the owner's membership lease has run out on the store's clock and the
// other member has claimed e's partition with a higher epoch.
func (f *fleet) expire(ctx context.Context, e partition.Epoch) error {
	f.frozen[e.Owner].freeze()
	for {
		for name, m := range f.members {
			if name == e.Owner {
				continue
			}
			for _, o := range m.Owned() {
				if o.Partition == e.Partition && o.Token > e.Token {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// errLapsed is the paused append cancelled by its own member: the member
// saw its lease lapse during the pause (here, when a heartbeat failed just
// before it; a paused process's timers run late) and took the partition
// away. Like a stale epoch, the append is run again from the start.
var errLapsed = errors.New("cancelled by its member: lease lapsed during the pause")

// forward sends an append to the member that owns the account: in a real
// fleet an RPC or partition.Forward (HTTP); here the members share a
// process. While the partition is moving (or a member cannot trust its own
// lease) it tries the members in turn, as a client retrying a 503 through a
// load balancer would.
func forward(ctx context.Context, members map[string]*partition.Member, fn func(m *partition.Member) error) error {
	names := slices.Sorted(maps.Keys(members))
	for i := 0; ; i++ {
		err := fn(members[names[i%len(names)]])
		var notOwner *partition.NotOwnerError
		switch {
		case errors.As(err, &notOwner) && members[notOwner.Owner] != nil:
			err = fn(members[notOwner.Owner])
			if !errors.Is(err, partition.ErrMoving) && !errors.Is(err, partition.ErrNotOwner) {
				return err
			}
		case !errors.Is(err, partition.ErrMoving) && !errors.Is(err, partition.ErrNotOwner):
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(context.Cause(ctx), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// freezer is a Membership whose calls can be held up, as a paused process
// holds up its own heartbeats.
type freezer struct {
	partition.Membership
	mu   sync.Mutex
	gate chan struct{} // nil, or closed when thawed
}

func (f *freezer) freeze() { f.mu.Lock(); f.gate = make(chan struct{}); f.mu.Unlock() }

func (f *freezer) thaw() {
	f.mu.Lock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
	f.mu.Unlock()
}

// wait holds a call while frozen. It ignores the call's context, as a
// paused process would: a member whose heartbeat hangs here cannot tell that
// its lease ran out, and keeps running the function it was running.
func (f *freezer) wait() {
	f.mu.Lock()
	g := f.gate
	f.mu.Unlock()
	if g != nil {
		<-g
	}
}

func (f *freezer) Join(ctx context.Context, m partition.MemberInfo, ttl time.Duration) (partition.MemberInfo, error) {
	f.wait()
	return f.Membership.Join(ctx, m, ttl)
}

func (f *freezer) Heartbeat(ctx context.Context, name string, inc int64, ttl time.Duration) error {
	f.wait()
	return f.Membership.Heartbeat(ctx, name, inc, ttl)
}

func (f *freezer) SetLeaving(ctx context.Context, name string, inc int64) error {
	f.wait()
	return f.Membership.SetLeaving(ctx, name, inc)
}

func (f *freezer) Leave(ctx context.Context, name string, inc int64) error {
	f.wait()
	return f.Membership.Leave(ctx, name, inc)
}

func (f *freezer) Live(ctx context.Context) ([]partition.MemberInfo, error) {
	f.wait()
	return f.Membership.Live(ctx)
}

func (f *freezer) Owners(ctx context.Context, n int) ([]partition.Epoch, error) {
	f.wait()
	return f.Membership.Owners(ctx, n)
}

func (f *freezer) Claim(ctx context.Context, member string, inc int64, ps []int) ([]partition.Epoch, error) {
	f.wait()
	return f.Membership.Claim(ctx, member, inc, ps)
}

func (f *freezer) Release(ctx context.Context, es []partition.Epoch) error {
	f.wait()
	return f.Membership.Release(ctx, es)
}

func (f *freezer) Check(ctx context.Context, e partition.Epoch) error {
	f.wait()
	return f.Membership.Check(ctx, e)
}
