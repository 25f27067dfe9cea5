package partition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/renew"
	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// lease is one incarnation of the member's membership lease and the loop
// that heartbeats it (the shared renewal loop, internal/renew).
type lease struct {
	info MemberInfo
	loop *renew.Loop
}

// leaseSafe reports whether the member's lease is held safely: live, and
// within TTL − Margin of the last heartbeat sent. Calls run only while it
// holds: this is what pauses the executors when heartbeats are late.
func (m *Member) leaseSafe() bool { return m.leaseSafeFor(0) }

// leaseSafeFor is leaseSafe for the lease of incarnation (any when 0). An
// executor asks for the incarnation that claimed its epoch: a later one,
// joined after that lease was lost, says nothing about that epoch.
func (m *Member) leaseSafeFor(incarnation int64) bool {
	m.mu.RLock()
	l := m.lease
	m.mu.RUnlock()
	if l == nil || (incarnation != 0 && l.info.Incarnation != incarnation) {
		return false
	}
	return l.loop.HeldSafely() || failpoint.Mutant("partition.member.paused")
}

// join starts a new lease (retrying while the name is in use when wait is
// set) and starts heartbeating it.
func (m *Member) join(ctx context.Context, wait bool) (MemberInfo, error) {
	var inUse error // the last ErrNameInUse, reported with ctx's end
	for {
		sent := time.Now()
		info, err := m.store.Join(ctx, MemberInfo{Name: m.cfg.Name, Addr: m.cfg.Addr, Ring: m.ringID}, m.cfg.TTL)
		if err == nil {
			m.startLease(info, sent)
			return info, nil
		}
		if inUse != nil && ctx.Err() != nil {
			// ctx ended while waiting for the name: say both.
			return MemberInfo{}, errors.Join(context.Cause(ctx), inUse)
		}
		if !wait || !errors.Is(err, ErrNameInUse) {
			return MemberInfo{}, err
		}
		inUse = err
		t := time.NewTimer(m.cfg.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return MemberInfo{}, errors.Join(context.Cause(ctx), inUse)
		case <-t.C:
		}
	}
}

// startLease heartbeats the lease info, granted by a request sent at sent,
// until the member stops or the lease is lost.
func (m *Member) startLease(info MemberInfo, sent time.Time) {
	run := m.runCtx
	l := &lease{info: info}
	l.loop = renew.Start(run, m.cfg.schedule(), sent, func(ctx context.Context) error { return m.heartbeat(ctx, info) })
	context.AfterFunc(l.loop.Context(), func() { m.leaseEnded(run, l) })
	m.mu.Lock()
	m.lease = l
	m.mu.Unlock()
}

// heartbeat renews the lease info once.
func (m *Member) heartbeat(ctx context.Context, info MemberInfo) error {
	failpoint.Inject(ctx, "partition.member.heartbeat")
	err := m.store.Heartbeat(ctx, info.Name, info.Incarnation, m.cfg.TTL)
	switch {
	case errors.Is(err, ErrExpired):
		return renew.Lost(err)
	case err != nil && ctx.Err() == nil:
		m.warn("partition: heartbeat failed", telemetry.Incarnation, info.Incarnation, telemetry.Err(err))
	}
	return err
}

// leaseEnded runs when l's loop ends. Unless the member ended it (run is
// done, or the loop was stopped), the lease can no longer be trusted. When
// no heartbeat answered in time, the store may still hold it: the executors
// only pause (the lease is not safely held, so they start no call) while the
// next step heartbeats that lease again, and they are stopped if the lease
// lapses first — TTL after the last heartbeat sent, when the store may let
// another member claim their partitions. When the store refused the lease,
// they stop at once. The next step then joins again.
func (m *Member) leaseEnded(run context.Context, l *lease) {
	cause := context.Cause(l.loop.Context())
	if run.Err() != nil || errors.Is(cause, renew.ErrStopped) {
		return
	}
	if errors.Is(cause, errLeaseExpiring) {
		m.warn("partition: heartbeat late, executors paused", telemetry.Incarnation, l.info.Incarnation)
		lapse := l.loop.SafeUntil().Add(m.cfg.Margin)
		time.AfterFunc(time.Until(lapse), func() { m.lapse(run, l) })
		m.poke()
		return
	}
	m.warn("partition: membership lease lost", telemetry.Incarnation, l.info.Incarnation, telemetry.Cause, cause)
	m.abortAll(ReasonLeaseLost)
	m.poke()
}

// lapse stops the executors paused under l unless a heartbeat of l's
// incarnation has resumed them (or a new lease replaced l) by now: the store
// may have let l expire, and another member may claim their partitions.
func (m *Member) lapse(run context.Context, l *lease) {
	if run.Err() != nil {
		return
	}
	m.mu.Lock()
	if m.lease != l {
		m.mu.Unlock()
		return
	}
	execs := m.execs
	m.execs = map[int]*executor{}
	m.mu.Unlock()
	if len(execs) > 0 {
		m.warn("partition: membership lease lost: no heartbeat answered before it could expire", telemetry.Incarnation, l.info.Incarnation)
	}
	for _, x := range execs {
		m.stopExec(x, ReasonLeaseLost, true)
	}
}

// ensureLease returns the member's live lease. When no heartbeat answered
// in time, it heartbeats that lease again: a heartbeat never revives an
// expired lease, so its success proves that no other member could have
// claimed this member's partitions, and the paused executors resume with
// their epochs. Otherwise — the store refused the lease — it stops every
// executor and joins again as a new incarnation, unless the member is
// leaving, when it returns a zero MemberInfo: there is nothing to rejoin.
func (m *Member) ensureLease(ctx context.Context) (MemberInfo, error) {
	m.mu.RLock()
	l, leaving := m.lease, !m.leavingFrom.IsZero()
	m.mu.RUnlock()
	if l != nil && l.loop.Context().Err() == nil {
		return l.info, nil
	}
	if l != nil && errors.Is(context.Cause(l.loop.Context()), errLeaseExpiring) {
		sent := time.Now()
		err := m.store.Heartbeat(ctx, l.info.Name, l.info.Incarnation, m.cfg.TTL)
		if err == nil {
			m.startLease(l.info, sent)
			return l.info, nil
		}
		if !errors.Is(err, ErrExpired) {
			return MemberInfo{}, fmt.Errorf("partition: heartbeat: %w", err)
		}
	}
	m.abortAll(ReasonLeaseLost)
	if leaving {
		return MemberInfo{}, nil
	}
	return m.join(ctx, false)
}
