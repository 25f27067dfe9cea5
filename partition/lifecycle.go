package partition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// Start joins the fleet as Config.Name, checks that the live members place
// partitions with the same ring, and takes the member's first step: it
// claims the partitions the ring places on the member that are free. It
// then returns: the member is running until Stop. A first step that fails
// (a store error, a claim that timed out) does not fail Start: the member
// has joined, and its background loop takes the step again every
// MoveInterval. Until the member has claimed a partition, Do answers
// ErrMoving for its keys (retry shortly), and a NotOwnerError for keys the
// ring places on other members.
//
// If a lease of the same name is still live (a previous incarnation), Start
// retries until that lease expires or ctx ends. Start fails when it cannot
// join, when ctx ends, with ErrRingMismatch when a live member places
// partitions with another ring, and with an error matching ErrInvalid for a
// ring it cannot build; it then leaves no lease behind, and may be called
// again. ctx bounds Start itself; the member's background work (heartbeats,
// polls, handoffs) keeps ctx's values but not its cancellation. Start on a
// running member returns nil, and on a stopped one ErrStopped. A Stop
// during Start ends it: Start then returns ErrStopped.
func (m *Member) Start(ctx context.Context) error {
	if err := m.hold(ctx); err != nil {
		return err
	}
	defer m.unhold()
	switch m.state {
	case running:
		return nil
	case stopped:
		return ErrStopped
	}
	ctx, endStart := context.WithCancelCause(ctx)
	defer endStart(nil)
	m.mu.Lock()
	if m.stopWanted { // a Stop waits for this Start, and must not see it run
		m.mu.Unlock()
		return ErrStopped
	}
	m.endStart = endStart
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.endStart = nil
		m.mu.Unlock()
	}()
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	m.runCtx, m.cancel, m.loopDone = runCtx, cancel, make(chan struct{})
	settled, err := m.start(ctx)
	if context.Cause(ctx) == ErrStopped { // a Stop ended this Start
		err = ErrStopped
	}
	if err != nil {
		m.abandon(ctx, err)
		return err
	}
	m.state = running
	m.mu.Lock()
	m.running = true
	m.mu.Unlock()
	go m.loop(runCtx, settled)
	return nil
}

// start joins, checks that the fleet uses this member's ring, and takes the
// member's first step. It reports whether that step left nothing moving; a
// step that failed for any reason but the ring is left to the loop.
func (m *Member) start(ctx context.Context) (settled bool, err error) {
	if _, err := m.join(ctx, true); err != nil {
		return false, err
	}
	live, err := m.store.Live(ctx)
	if err != nil {
		return false, fmt.Errorf("partition: live members: %w", err)
	}
	for _, o := range live {
		if o.Ring != m.ringID && o.Name != m.cfg.Name {
			return false, fmt.Errorf("%w: member %s uses %s, this member %s",
				ErrRingMismatch, short.Quote(o.Name), short.Quote(o.Ring), short.Quote(m.ringID))
		}
	}
	moving, err := m.step(ctx)
	switch {
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrRingMismatch):
		return false, err
	case ctx.Err() != nil:
		return false, context.Cause(ctx) // the caller gave up on Start
	case err != nil:
		// A claim that timed out on a loaded store is no reason to
		// give up the lease: the loop claims at its next step.
		m.warn("partition: first step failed, left to the background loop", telemetry.Err(err))
	}
	return err == nil && !moving, nil
}

// abandon undoes a failed Start: it stops what the start began and ends the
// lease it took, if any (which would otherwise expire after TTL).
func (m *Member) abandon(ctx context.Context, cause error) {
	m.cancel(cause)
	close(m.loopDone) // no loop ran
	info := m.halt(ReasonStopped)
	m.wg.Wait()
	if info.Incarnation != 0 {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.TTL)
		defer cancel()
		_ = m.store.Leave(lctx, info.Name, info.Incarnation) // the lease expires anyway
	}
	m.mu.Lock()
	m.lease = nil
	m.mu.Unlock()
}

// Stop leaves the fleet: it marks the member leaving, keeps serving for one
// Interval so that the other members see it go and get ready, then hands off
// every partition (stop accepting, drain, release) and ends its lease. A
// lease that has already run out (the member paused) leaves nothing to hand
// off: Stop just stops, and returns nil. If ctx ends first — or has ended
// before Stop is called — it stops the executors without releasing (the
// partitions move when the lease is gone, which Stop ends too; that call
// is bounded by TTL) and returns ctx's cause. Stop waits for the member's
// goroutines until ctx ends: a function that ignores its context is then
// left to finish in the background (its writes are fenced once another
// member claims the partition), and Stopped closes when it returns.
//
// A Start in progress is ended (it returns ErrStopped, and leaves no lease
// behind); Stop waits for it whatever ctx, which takes at most about TTL
// with a store that does not answer. Stop may be called more than once and
// concurrently: later calls wait until the member has stopped or their ctx
// ends. Stop on a member that was never started, or whose Start it ended,
// marks it stopped and returns nil.
func (m *Member) Stop(ctx context.Context) error {
	m.mu.Lock()
	m.stopWanted = true
	if m.endStart != nil {
		m.endStart(ErrStopped)
	}
	m.mu.Unlock()
	// Not hold(ctx): with ctx already ended, select would pick between it
	// and a free lifecycle at random, and Stop would return having stopped
	// nothing about half the time. Only a Start holds the lifecycle for
	// long, and it has just been told to end.
	m.life <- struct{}{}
	prev := m.state
	m.state = stopped
	m.unhold()
	switch prev {
	case idle:
		close(m.stopped)
		return nil
	case stopped:
		select {
		case <-m.stopped:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return m.leave(ctx)
}

// Stopped returns a channel that is closed once the member has stopped:
// Stop has ended its lease and every function it ran has returned.
func (m *Member) Stopped() <-chan struct{} { return m.stopped }

// leave is Stop for a running member.
func (m *Member) leave(ctx context.Context) error {
	m.mu.Lock()
	m.leavingFrom = time.Now()
	l := m.lease
	m.mu.Unlock()
	var err error
	if l != nil && l.loop.Context().Err() == nil {
		err = m.store.SetLeaving(ctx, l.info.Name, l.info.Incarnation)
		switch {
		case err == nil:
			m.poke()
			err = m.waitHandedOff(ctx)
		case errors.Is(err, ErrExpired):
			// The lease ran out before Stop (a pause, a late heartbeat):
			// there is nothing to hand off, the partitions move by expiry,
			// and stopping is all that is left to do.
			m.warn("partition: stopping without handoff: membership lease expired", telemetry.Incarnation, l.info.Incarnation)
			err = nil
		}
	}
	m.cancel(ErrStopped)
	<-m.loopDone
	info := m.halt(ReasonStopped)
	done := m.waitStopped(ctx)
	if done != nil && err == nil {
		err = done
	}
	if info.Incarnation != 0 {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.TTL)
		defer cancel()
		if lerr := m.store.Leave(lctx, info.Name, info.Incarnation); lerr != nil && err == nil {
			err = lerr
		}
	}
	if done == nil {
		close(m.stopped)
	} else {
		go func() { m.wg.Wait(); close(m.stopped) }()
	}
	return err
}

// halt stops accepting calls, stops the heartbeats and every executor
// without releasing, and returns the last lease's identity. The loop has
// ended.
func (m *Member) halt(reason string) MemberInfo {
	m.stepMu.Lock()
	defer m.stepMu.Unlock()
	m.mu.Lock()
	m.running = false
	l := m.lease
	m.mu.Unlock()
	if l == nil {
		return MemberInfo{}
	}
	l.loop.Stop(nil)
	m.abortAll(reason)
	return l.info
}

// waitStopped waits for the executors and the handoffs, or for ctx to end:
// a function that ignores its context must not hold Stop past its deadline.
// It then finishes in the background; its writes are fenced once another
// member claims its partition.
func (m *Member) waitStopped(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// waitHandedOff waits until the member owns and drains nothing.
func (m *Member) waitHandedOff(ctx context.Context) error {
	t := time.NewTicker(m.cfg.MoveInterval)
	defer t.Stop()
	for {
		m.mu.RLock()
		n := len(m.execs) + len(m.handing)
		m.mu.RUnlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// hold takes the right to change the member's state for Start, waiting for
// a Start or Stop in progress until ctx ends.
func (m *Member) hold(ctx context.Context) error {
	select {
	case m.life <- struct{}{}:
		return nil
	case <-ctx.Done():
		return errors.Join(context.Cause(ctx), fmt.Errorf("partition: waiting for a Start or Stop of %s", short.Quote(m.cfg.Name)))
	}
}

func (m *Member) unhold() { <-m.life }

// poke makes the loop step now.
func (m *Member) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// loop steps every Interval, or every MoveInterval while partitions move or
// a step failed (also the first, when settled is false), until ctx ends.
func (m *Member) loop(ctx context.Context, settled bool) {
	defer close(m.loopDone)
	delay := m.cfg.Interval
	if !settled {
		delay = m.cfg.MoveInterval
	}
	for {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-m.wake:
			t.Stop()
		case <-t.C:
		}
		moving, err := m.step(ctx)
		if err != nil && ctx.Err() == nil {
			m.warn("partition: member step failed", telemetry.Err(err))
		}
		delay = m.cfg.Interval
		if moving || err != nil {
			delay = m.cfg.MoveInterval
		}
	}
}
