package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/internal/short"
)

// Config configures a Member. Name is required; the other fields have
// defaults.
type Config struct {
	// Name identifies the member: unique among live members and stable for
	// the ring (the ring places names). Required.
	Name string
	// Addr is where other members forward requests for this member's keys,
	// e.g. "10.0.0.7:8080". Defaults to "".
	Addr string
	// Ring shapes the ring; every member of a fleet must use the same.
	// Defaults to the RingConfig defaults.
	Ring RingConfig
	// TTL is the membership lease: a member that stops heartbeating leaves
	// the live set after TTL and its partitions move. Defaults to 10s.
	TTL time.Duration
	// Interval is how often the member heartbeats and reads the membership
	// and ownership; it must be below TTL − Margin. Defaults to TTL/5.
	Interval time.Duration
	// MoveInterval is how often the member polls while partitions are moving
	// to or from it, which bounds the unavailability of a handover.
	// Defaults to Interval/10.
	MoveInterval time.Duration
	// Margin is how long before its lease could expire (on the local
	// monotonic clock, from when the last heartbeat was sent) the member
	// stops accepting work. Defaults to TTL/5.
	Margin time.Duration
	// DrainTimeout bounds the wait for a partition's queued and running
	// functions at handover; after it their contexts are cancelled and the
	// partition is released anyway (their writes are then fenced).
	// Defaults to TTL/2.
	DrainTimeout time.Duration
	// QueueSize is how many calls may wait per partition; Do blocks when
	// the queue is full. Defaults to 64.
	QueueSize int
	// OnEvent, when set, is called synchronously as partitions start, stop
	// and are released on this member. It must return quickly and must not
	// call the Member. Defaults to none.
	OnEvent func(Event)
	// Logger receives diagnostics (failed heartbeats, store errors).
	// Defaults to none.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.TTL == 0 {
		c.TTL = 10 * time.Second
	}
	if c.Interval == 0 {
		c.Interval = c.TTL / 5
	}
	if c.MoveInterval == 0 {
		c.MoveInterval = max(c.Interval/10, time.Millisecond)
	}
	if c.Margin == 0 {
		c.Margin = c.TTL / 5
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = c.TTL / 2
	}
	if c.QueueSize == 0 {
		c.QueueSize = 64
	}
	return c
}

func (c Config) validate() error {
	if err := validName("member name", c.Name, false); err != nil {
		return err
	}
	if err := validName("member address", c.Addr, true); err != nil {
		return err
	}
	if err := validTTL(c.TTL); err != nil {
		return err
	}
	switch {
	case c.Margin <= 0 || c.Interval <= 0 || c.Interval >= c.TTL-c.Margin:
		return fmt.Errorf("%w: interval %v must be positive and below ttl %v − margin %v", ErrInvalid, c.Interval, c.TTL, c.Margin)
	case c.MoveInterval <= 0 || c.MoveInterval > c.Interval:
		return fmt.Errorf("%w: move interval %v outside (0, interval %v]", ErrInvalid, c.MoveInterval, c.Interval)
	case c.DrainTimeout < 0:
		return fmt.Errorf("%w: drain timeout %v", ErrInvalid, c.DrainTimeout)
	case c.QueueSize < 1:
		return fmt.Errorf("%w: queue size %d", ErrInvalid, c.QueueSize)
	}
	return c.Ring.withDefaults().validate()
}

// EventKind says what happened to a partition on a member.
type EventKind int

const (
	// Started: the member claimed the partition and accepts work for it.
	Started EventKind = iota + 1
	// Stopped: the member no longer accepts work for the partition; Reason
	// says why. Work already queued drains after a handoff and is rejected
	// otherwise.
	Stopped
	// Released: after a handoff, the member drained and released the
	// partition, which another member may now claim.
	Released
)

func (k EventKind) String() string {
	switch k {
	case Started:
		return "started"
	case Stopped:
		return "stopped"
	case Released:
		return "released"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Reasons for a Stopped event.
const (
	// ReasonHandoff: the ring places the partition on another member.
	ReasonHandoff = "handoff"
	// ReasonSuperseded: another member claimed the partition (this member's
	// lease had expired in the store's eyes).
	ReasonSuperseded = "superseded"
	// ReasonLeaseLost: this member's lease expired or could not be renewed
	// in time.
	ReasonLeaseLost = "lease lost"
	// ReasonClosed: the member was closed before it could hand off.
	ReasonClosed = "closed"
)

// Event reports a change of a partition on a member, to Config.OnEvent.
type Event struct {
	Kind   EventKind
	Epoch  Epoch
	Reason string // for Stopped
}

// Member is one member of a fleet: it keeps its membership lease, claims the
// partitions the ring places on it, hands off the others, and runs Do's
// functions on a serial executor per owned partition. Its methods are safe
// for concurrent use. Create it with NewMember; Close it to leave.
type Member struct {
	cfg    Config
	store  Membership
	ringID string

	stop     context.CancelCauseFunc
	wake     chan struct{} // a step is wanted now
	loopDone chan struct{}
	stepMu   sync.Mutex // one step at a time
	wg       sync.WaitGroup

	mu          sync.RWMutex
	info        MemberInfo // Incarnation 0 while not joined
	safeUntil   time.Time  // local monotonic time
	lastBeat    time.Time
	ring        *Ring
	addrs       map[string]string
	execs       map[int]*executor
	handing     map[int]bool // partitions being drained and released
	leavingFrom time.Time    // when Close marked the member leaving
	closed      bool
}

// NewMember joins the fleet in store as cfg.Name and claims the partitions
// the ring places on it that are free, before returning. If a lease of the
// same name is still live (a previous incarnation), it retries until that
// lease expires or ctx ends. It fails with ErrRingMismatch when a live
// member places partitions with another ring. The member keeps running until
// Close; ctx only bounds NewMember itself.
func NewMember(ctx context.Context, cfg Config, store Membership) (*Member, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("partition: invalid config: %w", err)
	}
	cfg.Ring = cfg.Ring.withDefaults()
	ring, err := NewRing(nil, cfg.Ring)
	if err != nil {
		return nil, err
	}
	m := &Member{
		cfg: cfg, store: store, ringID: ring.ID(), ring: ring,
		addrs: map[string]string{}, execs: map[int]*executor{}, handing: map[int]bool{},
		loopDone: make(chan struct{}), wake: make(chan struct{}, 1),
	}
	if err := m.join(ctx, true); err != nil {
		return nil, err
	}
	live, err := store.Live(ctx)
	if err == nil {
		for _, o := range live {
			if o.Ring != m.ringID && o.Name != cfg.Name {
				err = fmt.Errorf("%w: member %s uses %s, this member %s", ErrRingMismatch, short.Quote(o.Name), short.Quote(o.Ring), short.Quote(m.ringID))
				break
			}
		}
	}
	if err == nil {
		_, err = m.step(ctx)
	}
	if err != nil {
		m.abortAll(ReasonClosed)
		m.wg.Wait()
		_ = m.store.Leave(context.WithoutCancel(ctx), cfg.Name, m.info.Incarnation) // the lease expires anyway
		return nil, err
	}
	loopCtx, stop := context.WithCancelCause(context.Background())
	m.stop = stop
	go m.loop(loopCtx)
	return m, nil
}

// Name returns the member's name.
func (m *Member) Name() string { return m.cfg.Name }

// Ring returns the ring the member last computed from the live members.
func (m *Member) Ring() *Ring {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.ring
}

// Owned returns the epochs of the partitions the member accepts work for,
// in partition order.
func (m *Member) Owned() []Epoch {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]Epoch, 0, len(m.execs))
	for _, x := range m.execs {
		out = append(out, x.epoch)
	}
	slices.SortFunc(out, func(a, b Epoch) int { return a.Partition - b.Partition })
	return out
}

// Partition returns the partition of key.
func (m *Member) Partition(key string) int { return partitionOf(key, m.cfg.Ring.Partitions) }

// Do runs fn on the serial executor of key's partition if this member owns
// it, after the functions queued before it, and returns fn's error. fn gets
// the partition's epoch: it must present it with its writes
// ([Postgres.Verify], [Memory.Verify]) because a pause can outlast the
// member's lease. fn's context is cancelled when ctx is, or when the
// partition is taken away and its drain timeout has passed.
//
// When another member owns the key Do returns a *NotOwnerError naming it
// (forward the call there, e.g. with [Forward]); while the partition is
// moving, or this member cannot trust its lease, an error matching ErrMoving
// (retry shortly); after Close, ErrClosed. If fn panics, Do returns a
// *PanicError (ErrPanic) and the executor runs the next call. If ctx ends
// while fn is queued, Do returns ctx's cause and fn does not run; if it ends
// while fn runs, Do returns at once and fn's result is lost.
func (m *Member) Do(ctx context.Context, key string, fn func(ctx context.Context, e Epoch) error) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	p := m.Partition(key)
	m.mu.RLock()
	closed, x, safe := m.closed, m.execs[p], m.safeUntil
	m.mu.RUnlock()
	switch {
	case closed:
		return ErrClosed
	case x == nil:
		return m.elsewhere(key, p)
	case !time.Now().Before(safe):
		return fmt.Errorf("%w: partition %d: membership lease not safely held", ErrMoving, p)
	}
	err := x.do(ctx, fn)
	if errors.Is(err, errNotAccepting) {
		return m.elsewhere(key, p)
	}
	return err
}

// elsewhere explains why key is not served here.
func (m *Member) elsewhere(key string, p int) error {
	m.mu.RLock()
	owner, addr, closed := m.ring.Owner(p), "", m.closed
	if owner != "" {
		addr = m.addrs[owner]
	}
	m.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if owner == "" || owner == m.cfg.Name {
		return fmt.Errorf("%w: partition %d", ErrMoving, p)
	}
	return &NotOwnerError{Key: key, Partition: p, Owner: owner, Addr: addr}
}

// Owner returns the member the ring places key on and its address, or ""
// when no member is live.
func (m *Member) Owner(key string) (name, addr string) {
	p := m.Partition(key)
	m.mu.RLock()
	defer m.mu.RUnlock()
	name = m.ring.Owner(p)
	return name, m.addrs[name]
}

// Close leaves the fleet: it marks the member leaving, keeps serving for one
// Interval so that the other members see it go and get ready, then hands off
// every partition (stop accepting, drain, release) and ends its lease. If
// ctx ends first, it stops the executors without releasing (the partitions
// move when the lease is gone, which Close ends too) and returns ctx's
// cause. Close waits for the member's goroutines until ctx ends: a function
// that ignores its context is then left to finish in the background (its
// writes are fenced once another member claims the partition). Calling
// Close again returns ErrClosed.
func (m *Member) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed || !m.leavingFrom.IsZero() {
		m.mu.Unlock()
		return ErrClosed
	}
	m.leavingFrom = time.Now()
	info := m.info
	m.mu.Unlock()

	err := m.store.SetLeaving(ctx, info.Name, info.Incarnation)
	if err == nil {
		m.poke()
		err = m.waitHandedOff(ctx)
	}
	m.stop(ErrClosed)
	<-m.loopDone
	m.stepMu.Lock()
	m.mu.Lock()
	m.closed = true
	info = m.info
	m.mu.Unlock()
	m.abortAll(ReasonClosed)
	m.stepMu.Unlock()
	if werr := m.waitStopped(ctx); err == nil {
		err = werr
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.TTL)
	defer cancel()
	if lerr := m.store.Leave(lctx, info.Name, info.Incarnation); lerr != nil && err == nil {
		err = lerr
	}
	return err
}

// waitStopped waits for the executors and the handoffs, or for ctx to end:
// a function that ignores its context must not hold Close past its
// deadline. It then finishes in the background; its writes are fenced once
// another member claims its partition.
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

// poke makes the loop step now.
func (m *Member) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// join starts a new lease (retrying while the name is in use when wait is
// set) and records it.
func (m *Member) join(ctx context.Context, wait bool) error {
	var inUse error // the last ErrNameInUse, reported with ctx's end
	for {
		sent := time.Now()
		info, err := m.store.Join(ctx, MemberInfo{Name: m.cfg.Name, Addr: m.cfg.Addr, Ring: m.ringID}, m.cfg.TTL)
		if err == nil {
			m.mu.Lock()
			m.info, m.lastBeat = info, sent
			m.safeUntil = sent.Add(m.cfg.TTL - m.cfg.Margin)
			m.mu.Unlock()
			return nil
		}
		if inUse != nil && ctx.Err() != nil {
			// ctx ended while waiting for the name: say both.
			return errors.Join(context.Cause(ctx), inUse)
		}
		if !wait || !errors.Is(err, ErrNameInUse) {
			return err
		}
		inUse = err
		t := time.NewTimer(m.cfg.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(context.Cause(ctx), inUse)
		case <-t.C:
		}
	}
}

func (m *Member) loop(ctx context.Context) {
	defer close(m.loopDone)
	delay := m.cfg.Interval
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
		if err != nil && ctx.Err() == nil && m.cfg.Logger != nil {
			m.cfg.Logger.Warn("partition: member step failed", "member", m.cfg.Name, "err", err)
		}
		delay = m.cfg.Interval
		if moving || err != nil {
			delay = m.cfg.MoveInterval
		}
	}
}

// step heartbeats, reads the fleet and the ownership rows, and reconciles:
// it drops partitions it lost, hands off those the ring moved away and
// claims those the ring placed here. It reports whether partitions are
// still moving to or from this member.
func (m *Member) step(ctx context.Context) (moving bool, err error) {
	m.stepMu.Lock()
	defer m.stepMu.Unlock()

	m.mu.RLock()
	info, lastBeat, leavingFrom := m.info, m.lastBeat, m.leavingFrom
	m.mu.RUnlock()
	if info.Incarnation == 0 {
		if !leavingFrom.IsZero() {
			return true, nil // lost the lease while leaving: nothing to rejoin
		}
		if err := m.join(ctx, false); err != nil {
			return true, err
		}
	} else if time.Since(lastBeat) >= m.cfg.Interval-m.cfg.MoveInterval {
		sent := time.Now()
		err := m.store.Heartbeat(ctx, info.Name, info.Incarnation, m.cfg.TTL)
		switch {
		case err == nil:
			m.mu.Lock()
			m.lastBeat, m.safeUntil = sent, sent.Add(m.cfg.TTL-m.cfg.Margin)
			m.mu.Unlock()
		case errors.Is(err, ErrExpired):
			// Paused past the lease: everything may have moved.
			m.abortAll(ReasonLeaseLost)
			m.mu.Lock()
			m.info.Incarnation = 0
			m.mu.Unlock()
			if leavingFrom.IsZero() {
				if jerr := m.join(ctx, false); jerr != nil {
					return true, errors.Join(err, jerr)
				}
			}
			return true, err
		default:
			m.mu.RLock()
			lost := !time.Now().Before(m.safeUntil)
			m.mu.RUnlock()
			if lost {
				m.abortAll(ReasonLeaseLost)
			}
			return true, fmt.Errorf("partition: heartbeat: %w", err)
		}
	}

	m.mu.RLock()
	info = m.info
	m.mu.RUnlock()

	live, err := m.store.Live(ctx)
	if err != nil {
		return true, fmt.Errorf("partition: live members: %w", err)
	}
	owners, err := m.store.Owners(ctx, m.cfg.Ring.Partitions)
	if err != nil {
		return true, fmt.Errorf("partition: owners: %w", err)
	}
	var names []string
	alive := map[string]bool{}
	addrs := map[string]string{}
	graceOver := !leavingFrom.IsZero() && time.Since(leavingFrom) >= m.cfg.Interval
	for _, o := range live {
		alive[o.Name] = true
		addrs[o.Name] = o.Addr
		self := o.Name == m.cfg.Name
		if o.Ring != m.ringID || (o.Leaving && !self) || (self && graceOver) {
			continue
		}
		names = append(names, o.Name)
	}
	slices.Sort(names)
	ring := m.Ring()
	if !slices.Equal(names, ring.members) {
		if ring, err = NewRing(names, m.cfg.Ring); err != nil {
			return true, err
		}
	}

	m.mu.Lock()
	m.ring, m.addrs = ring, addrs
	var handoff []*executor
	var superseded []*executor
	for p, x := range m.execs {
		row := owners[p]
		switch {
		case row.Owner != x.epoch.Owner || row.Token != x.epoch.Token:
			superseded = append(superseded, x)
			delete(m.execs, p)
		case ring.Owner(p) != m.cfg.Name:
			handoff = append(handoff, x)
			delete(m.execs, p)
			m.handing[p] = true
		}
	}
	var claim []int
	for p, row := range owners {
		if ring.Owner(p) != m.cfg.Name || m.execs[p] != nil || m.handing[p] {
			continue
		}
		moving = true
		if row.Owner == "" || row.Owner == m.cfg.Name || !alive[row.Owner] {
			claim = append(claim, p)
		}
	}
	safe := time.Now().Before(m.safeUntil)
	moving = moving || len(m.handing) > 0 || !leavingFrom.IsZero()
	m.mu.Unlock()

	for _, x := range superseded {
		m.stopExec(x, ReasonSuperseded, true)
	}
	if len(handoff) > 0 {
		m.handOff(handoff)
	}
	if len(claim) == 0 || !safe {
		return moving, nil
	}
	epochs, err := m.store.Claim(ctx, info.Name, info.Incarnation, claim)
	if err != nil {
		return true, fmt.Errorf("partition: claim: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range epochs {
		x := newExecutor(e, m.cfg.QueueSize, m.leaseSafe)
		m.execs[e.Partition] = x
		m.wg.Add(1)
		go func() { defer m.wg.Done(); x.run() }()
		m.event(Event{Kind: Started, Epoch: e})
	}
	return moving, nil
}

func (m *Member) leaseSafe() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return time.Now().Before(m.safeUntil)
}

func (m *Member) event(e Event) {
	if m.cfg.OnEvent != nil {
		m.cfg.OnEvent(e)
	}
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

// handOff stops the executors at once, then, in the background, drains
// them (bounded by DrainTimeout) and releases their partitions.
func (m *Member) handOff(xs []*executor) {
	for _, x := range xs {
		m.stopExec(x, ReasonHandoff, false)
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		timer := time.NewTimer(m.cfg.DrainTimeout)
		defer timer.Stop()
		epochs := make([]Epoch, len(xs))
		expired := false
		for i, x := range xs {
			epochs[i] = x.epoch
			if expired {
				continue
			}
			select {
			case <-x.done:
			case <-timer.C:
				// Release anyway: the new owner's epoch fences what
				// still runs here.
				expired = true
				for _, x := range xs[i:] {
					x.cancel(fmt.Errorf("%w: partition %d drain timeout", ErrMoving, x.epoch.Partition))
				}
			}
		}
		slices.SortFunc(epochs, func(a, b Epoch) int { return a.Partition - b.Partition })
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.TTL)
		err := m.store.Release(ctx, epochs)
		cancel()
		if err != nil && m.cfg.Logger != nil {
			m.cfg.Logger.Warn("partition: release failed", "member", m.cfg.Name, "err", err)
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

// errNotAccepting is the executor's internal answer once it has stopped.
var errNotAccepting = errors.New("partition: executor stopped")

type job struct {
	ctx  context.Context
	fn   func(context.Context, Epoch) error
	done chan error
}

// executor is a partition's serial executor: one goroutine running queued
// functions in order.
type executor struct {
	epoch    Epoch
	safe     func() bool
	jobs     chan *job
	stopping chan struct{}
	ctx      context.Context
	cancel   context.CancelCauseFunc
	done     chan struct{}

	mu        sync.RWMutex
	accepting bool
	stopOnce  sync.Once
}

func newExecutor(e Epoch, queue int, safe func() bool) *executor {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &executor{
		epoch: e, safe: safe, jobs: make(chan *job, queue), stopping: make(chan struct{}),
		ctx: ctx, cancel: cancel, done: make(chan struct{}), accepting: true,
	}
}

func (x *executor) do(ctx context.Context, fn func(context.Context, Epoch) error) error {
	x.mu.RLock()
	if !x.accepting {
		x.mu.RUnlock()
		return errNotAccepting
	}
	j := &job{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case x.jobs <- j:
		x.mu.RUnlock()
	case <-x.stopping:
		x.mu.RUnlock()
		return errNotAccepting
	case <-ctx.Done():
		x.mu.RUnlock()
		return context.Cause(ctx)
	}
	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// stop ends acceptance; queued jobs still run unless the executor is
// cancelled.
func (x *executor) stop() {
	x.stopOnce.Do(func() {
		close(x.stopping)
		x.mu.Lock()
		x.accepting = false
		close(x.jobs)
		x.mu.Unlock()
	})
}

func (x *executor) run() {
	defer close(x.done)
	defer x.cancel(nil)
	for j := range x.jobs {
		if err := x.ctx.Err(); err != nil {
			j.done <- context.Cause(x.ctx)
			continue
		}
		if err := j.ctx.Err(); err != nil {
			j.done <- context.Cause(j.ctx)
			continue
		}
		if !x.safe() {
			j.done <- fmt.Errorf("%w: partition %d: membership lease not safely held", ErrMoving, x.epoch.Partition)
			continue
		}
		j.done <- x.call(j)
	}
}

// call runs j's function with a context that also ends with the executor's.
// A panic becomes a *PanicError: this goroutine is the executor's, beyond
// any recovery of Do's caller, so an unrecovered panic would end the process.
func (x *executor) call(j *job) (err error) {
	ctx, cancel := context.WithCancelCause(j.ctx)
	unhook := context.AfterFunc(x.ctx, func() { cancel(context.Cause(x.ctx)) })
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
		unhook()
		cancel(nil)
	}()
	return j.fn(ctx, x.epoch)
}
