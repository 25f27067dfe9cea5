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
// within TTL − Margin of the last heartbeat sent.
func (m *Member) leaseSafe() bool {
	m.mu.RLock()
	l := m.lease
	m.mu.RUnlock()
	return l != nil && l.loop.HeldSafely()
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
// done, or the loop was stopped), the lease can no longer be trusted: the
// executors stop at once, and the next step joins again.
func (m *Member) leaseEnded(run context.Context, l *lease) {
	cause := context.Cause(l.loop.Context())
	if run.Err() != nil || errors.Is(cause, renew.ErrStopped) {
		return
	}
	m.warn("partition: membership lease lost", "incarnation", l.info.Incarnation, "cause", cause)
	m.abortAll(ReasonLeaseLost)
	m.poke()
}

// ensureLease returns the member's live lease. When the last one was lost
// it stops every executor, then renews that lease if only this member gave
// up on it (no heartbeat in time: the store may still hold it), or joins
// again as a new incarnation — unless the member is leaving, when it
// returns a zero MemberInfo: there is nothing to rejoin.
func (m *Member) ensureLease(ctx context.Context) (MemberInfo, error) {
	m.mu.RLock()
	l, leaving := m.lease, !m.leavingFrom.IsZero()
	m.mu.RUnlock()
	if l != nil && l.loop.Context().Err() == nil {
		return l.info, nil
	}
	m.abortAll(ReasonLeaseLost)
	if leaving {
		return MemberInfo{}, nil
	}
	if l != nil && !errors.Is(context.Cause(l.loop.Context()), ErrExpired) {
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
	return m.join(ctx, false)
}
