package partition

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// step makes sure the member holds a lease, reads the fleet and the
// ownership rows, and reconciles: it drops partitions it lost, hands off
// those the ring moved away and claims those the ring placed here. It
// reports whether partitions are still moving to or from this member.
func (m *Member) step(ctx context.Context) (moving bool, err error) {
	m.stepMu.Lock()
	defer m.stepMu.Unlock()
	failpoint.Inject(ctx, "partition.member.reconcile")
	// A step that outlasts a lease is of no use, and one hung on an
	// unreachable store must not keep the member from its next attempt.
	ctx, cancel := context.WithTimeout(ctx, m.cfg.TTL)
	defer cancel()
	info, err := m.ensureLease(ctx)
	if err != nil || info.Incarnation == 0 {
		return true, err
	}
	v, err := m.observe(ctx)
	if err != nil {
		return true, err
	}
	claim, moving := m.apply(v)
	if len(claim) == 0 || !m.leaseSafe() {
		return moving, nil
	}
	failpoint.Inject(ctx, "partition.member.before-claim")
	if err := m.claim(ctx, info, claim); err != nil {
		return true, err
	}
	return moving, nil
}

// view is what the store says of the fleet, and the ring it makes.
type view struct {
	owners []Epoch // per partition
	ring   *Ring
	alive  map[string]bool   // live members, this ring's or not
	addrs  map[string]string // their addresses
}

// observe reads the live members and the ownership rows, and builds the
// ring (anew only when its members changed).
func (m *Member) observe(ctx context.Context) (view, error) {
	live, err := m.store.Live(ctx)
	if err != nil {
		return view{}, fmt.Errorf("partition: live members: %w", err)
	}
	owners, err := m.store.Owners(ctx, m.ringCfg.Partitions)
	if err != nil {
		return view{}, fmt.Errorf("partition: owners: %w", err)
	}
	m.mu.RLock()
	ring, leavingFrom := m.ring, m.leavingFrom
	m.mu.RUnlock()
	// A leaving member stays on its own ring for one Interval, so that the
	// others see it leave before its partitions come free.
	selfOut := !leavingFrom.IsZero() && time.Since(leavingFrom) >= m.cfg.Interval
	names, alive, addrs := fleet(live, m.cfg.Name, m.ringID, selfOut)
	if !slices.Equal(names, ring.members) {
		if ring, err = newRing(names, m.ringCfg); err != nil {
			return view{}, err
		}
	}
	return view{owners: owners, ring: ring, alive: alive, addrs: addrs}, nil
}

// fleet returns, from the live members, the sorted names the ring places
// partitions on — those with this ring, not leaving, and self unless selfOut
// — and who is alive at which address.
func fleet(live []MemberInfo, self, ringID string, selfOut bool) (names []string, alive map[string]bool, addrs map[string]string) {
	alive, addrs = map[string]bool{}, map[string]string{}
	for _, o := range live {
		alive[o.Name], addrs[o.Name] = true, o.Addr
		isSelf := o.Name == self
		if o.Ring != ringID || (o.Leaving && !isSelf) || (isSelf && selfOut) {
			continue
		}
		names = append(names, o.Name)
	}
	slices.Sort(names)
	return names, alive, addrs
}

// plan is what one reconciliation does.
type plan struct {
	superseded []int   // running partitions whose epoch is no longer current: abort
	handoff    []int   // running partitions the ring placed elsewhere: drain, release
	orphans    []Epoch // rows of self that it does not run, placed elsewhere: release
	claim      []int   // partitions to claim, increasing
	incoming   []int   // partitions moving here from another member
	moving     bool    // partitions are still moving to or from the member
}

// reconcile compares what member self runs (running, by partition) and
// hands off (handing) with the ownership rows and the ring. A running
// partition whose row shows another epoch was superseded; one the ring
// places elsewhere is handed off. A row of self's that self neither runs
// nor hands off (a release that failed, executors stopped for a late
// heartbeat, a claim whose executors never started) is an orphan when the
// ring places it elsewhere: no other member may claim it while self lives,
// so self releases it. A partition the ring places here that is neither
// running nor handed off is moving here, and is claimed when its owner is
// none, self, or not alive. It does no I/O.
func reconcile(self string, owners []Epoch, ring *Ring, alive map[string]bool, running map[int]Epoch, handing map[int]bool) plan {
	var pl plan
	kept, handed := map[int]bool{}, map[int]bool{}
	for _, p := range slices.Sorted(maps.Keys(running)) {
		e := running[p]
		var row Epoch
		if p < len(owners) {
			row = owners[p]
		}
		switch {
		case row.Owner != e.Owner || row.Token != e.Token:
			pl.superseded = append(pl.superseded, p)
		case ring.Owner(p) != self:
			pl.handoff = append(pl.handoff, p)
			handed[p] = true
		default:
			kept[p] = true
		}
	}
	for p, row := range owners {
		if ring.Owner(p) != self && row.Owner == self && !handed[p] && !handing[p] {
			pl.orphans = append(pl.orphans, row)
		}
		if ring.Owner(p) != self || kept[p] || handing[p] {
			continue
		}
		pl.moving = true
		if row.Token > 0 && row.Owner != self {
			pl.incoming = append(pl.incoming, p)
		}
		if row.Owner == "" || row.Owner == self || !alive[row.Owner] {
			pl.claim = append(pl.claim, p)
		}
	}
	pl.moving = pl.moving || len(pl.handoff) > 0 || len(pl.orphans) > 0 || len(handing) > 0
	return pl
}

// apply makes the view the member's and carries out the plan's aborts and
// handoffs; it returns the partitions to claim and whether partitions are
// moving.
func (m *Member) apply(v view) (claim []int, moving bool) {
	m.mu.Lock()
	m.ring, m.addrs = v.ring, v.addrs
	running := make(map[int]Epoch, len(m.execs))
	for p, x := range m.execs {
		running[p] = x.epoch
	}
	pl := reconcile(m.cfg.Name, v.owners, v.ring, v.alive, running, m.handing)
	m.track(pl.incoming)
	superseded, handoff := m.take(pl.superseded), m.take(pl.handoff)
	for _, x := range handoff {
		m.handing[x.epoch.Partition] = true
	}
	// An orphan's last executor was stopped (or never ran): its release
	// waits for it as a handoff's waits for its drain.
	var orphaned []*executor
	for _, e := range pl.orphans {
		m.handing[e.Partition] = true
		if x := m.last[e.Partition]; x != nil {
			orphaned = append(orphaned, x)
		}
	}
	moving = pl.moving || !m.leavingFrom.IsZero()
	m.mu.Unlock()

	for _, x := range superseded {
		m.stopExec(x, ReasonSuperseded, true)
	}
	if len(handoff) > 0 {
		m.handOff(handoff)
	}
	if len(pl.orphans) > 0 {
		m.warn("partition: releasing partitions owned but not run", telemetry.Count, len(pl.orphans))
		m.release(orphaned, pl.orphans)
	}
	return pl.claim, moving
}

// track notes since when each partition in incoming has been moving here
// from another member, for the handover metrics; a partition no longer
// moving here is forgotten. The caller holds mu.
func (m *Member) track(incoming []int) {
	if len(incoming) == 0 && len(m.incoming) == 0 {
		return
	}
	now, next := time.Now(), make(map[int]time.Time, len(incoming))
	for _, p := range incoming {
		if t, ok := m.incoming[p]; ok {
			next[p] = t
		} else {
			next[p] = now
		}
	}
	m.incoming = next
}

// take removes the executors of ps and returns them. The caller holds mu.
func (m *Member) take(ps []int) []*executor {
	xs := make([]*executor, 0, len(ps))
	for _, p := range ps {
		xs = append(xs, m.execs[p])
		delete(m.execs, p)
	}
	return xs
}

// claim claims ps under the lease info and starts their executors, unless
// the lease ended meanwhile: the partitions are then claimed again, with new
// epochs, under the next lease.
func (m *Member) claim(ctx context.Context, info MemberInfo, ps []int) error {
	epochs, err := m.store.Claim(ctx, info.Name, info.Incarnation, ps)
	if err != nil {
		return fmt.Errorf("partition: claim: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.lease; l == nil || l.info.Incarnation != info.Incarnation || l.loop.Context().Err() != nil {
		return nil
	}
	for _, e := range epochs {
		x := newExecutor(e, m.cfg.QueueSize, func() bool { return m.leaseSafeFor(info.Incarnation) })
		m.execs[e.Partition], m.last[e.Partition] = x, x
		m.wg.Add(1)
		go func() { defer m.wg.Done(); x.run() }()
		if since, ok := m.incoming[e.Partition]; ok {
			delete(m.incoming, e.Partition)
			m.tel.claimed(since)
		}
		m.event(Event{Kind: Started, Epoch: e})
	}
	return nil
}

// stopExec stops x accepting work; abort also cancels its running function
// and rejects what is queued.
func (m *Member) stopExec(x *executor, reason string, abort bool) {
	x.stop()
	m.event(Event{Kind: Stopped, Epoch: x.epoch, Reason: reason})
	if abort {
		x.cancel(fmt.Errorf("%w: partition %d %s", ErrMoving, x.epoch.Partition, reason))
	}
}

// abortAll stops every executor without releasing: the partitions move by
// lease expiry or are claimed anew (bumping the epoch).
func (m *Member) abortAll(reason string) {
	m.mu.Lock()
	execs := m.execs
	m.execs = map[int]*executor{}
	m.mu.Unlock()
	for _, x := range execs {
		m.stopExec(x, reason, true)
	}
}

// handOff stops the executors xs (in partition order) at once, then, in
// the background, drains them and releases their partitions.
func (m *Member) handOff(xs []*executor) {
	epochs := make([]Epoch, len(xs))
	for i, x := range xs {
		m.stopExec(x, ReasonHandoff, false)
		epochs[i] = x.epoch
	}
	m.release(xs, epochs)
}

// release, in the background, drains the stopped executors xs and then
// releases epochs: the partitions xs ran, handed off, or rows of this
// member that it no longer runs. The partitions are in handing until then.
func (m *Member) release(xs []*executor, epochs []Epoch) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.drain(xs)
		// Between the drain and the release: a pause here can outlast the
		// member's lease, and the release then reaches the store after
		// another member claimed the partition — a stale release, which
		// Release refuses by (owner, epoch).
		failpoint.Inject(m.runCtx, "partition.member.before-release")
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.runCtx), m.cfg.TTL)
		err := m.store.Release(ctx, epochs)
		cancel()
		if err != nil {
			// A row still ours is an orphan at the next step, released again.
			m.warn("partition: release failed", telemetry.Err(err))
		}
		m.mu.Lock()
		for _, e := range epochs {
			delete(m.handing, e.Partition)
		}
		m.mu.Unlock()
		for _, e := range epochs {
			m.event(Event{Kind: Released, Epoch: e})
		}
	}()
}

// drain waits for the executors xs to finish what they accepted, for at
// most DrainTimeout. Past the timeout it cancels what still runs: the new
// owner's epoch fences it.
func (m *Member) drain(xs []*executor) {
	timer := time.NewTimer(m.cfg.DrainTimeout)
	defer timer.Stop()
	for i, x := range xs {
		select {
		case <-x.done:
		case <-timer.C:
			for _, x := range xs[i:] {
				x.cancel(fmt.Errorf("%w: partition %d drain timeout", ErrMoving, x.epoch.Partition))
			}
			return
		}
	}
}
