package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/internal/renew"
	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// Config configures a Member. A nil *Config means the defaults.
type Config struct {
	// Name identifies the member in the ring and in the membership table;
	// it must be unique among live members. The ring places names, so a
	// process that keeps its name across restarts gets its partitions
	// back. Defaults to a new UUIDv7 per Member (unique without
	// coordination).
	Name string
	// Addr is where other members forward requests for this member's keys,
	// e.g. "10.0.0.7:8080". Defaults to "".
	Addr string
	// Forward configures Forward on this member: how members recognise
	// each other's forwarded requests, and the bounds on reading a request
	// body. Defaults to the ForwardConfig defaults (no secret: Forward
	// proxies nothing).
	Forward *ForwardConfig
	// Ring shapes the ring; every member of a fleet must use the same.
	// Defaults to the RingConfig defaults.
	Ring *RingConfig
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
	// stops accepting work when no heartbeat has answered: its executors
	// pause, and resume with their epochs if a heartbeat then succeeds;
	// they stop when the lease could have expired (TTL after that last
	// heartbeat was sent) or the store refuses it. Defaults to TTL/5.
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
	// Logger receives diagnostics (failed heartbeats, lost leases, store
	// errors). Defaults to none.
	Logger *slog.Logger
	// MeterProvider receives the member's metrics (docs/partition.md,
	// "Metrics"). Defaults to none: nothing is recorded.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span for each call of Do, with the
	// partition and its epoch. Defaults to none: no span is started.
	TracerProvider trace.TracerProvider
}

func (c *Config) withDefaults() Config {
	var d Config
	if c != nil {
		d = *c
	}
	if d.Name == "" {
		d.Name = uuid.Must(uuid.NewV7()).String()
	}
	if d.TTL == 0 {
		d.TTL = 10 * time.Second
	}
	if d.Interval == 0 {
		d.Interval = d.TTL / 5
	}
	if d.MoveInterval == 0 {
		d.MoveInterval = max(d.Interval/10, time.Millisecond)
	}
	if d.Margin == 0 {
		d.Margin = d.TTL / 5
	}
	if d.DrainTimeout == 0 {
		d.DrainTimeout = d.TTL / 2
	}
	if d.QueueSize == 0 {
		d.QueueSize = 64
	}
	return d
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
	if err := c.Forward.withDefaults().validate(); err != nil {
		return err
	}
	return c.Ring.withDefaults().validate()
}

// schedule is the renewal loop of the membership lease.
func (c Config) schedule() renew.Config {
	return renew.Config{TTL: c.TTL, Interval: c.Interval, Margin: c.Margin, MaxRenewals: -1,
		Expiring: errLeaseExpiring, Exhausted: errLeaseExpiring}
}

// errLeaseExpiring ends a lease that no heartbeat renewed in time: the
// store may still hold it, so the member pauses its executors and
// heartbeats it again before giving it up.
var errLeaseExpiring = errors.New("partition: membership lease about to expire without a heartbeat")

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
	// ReasonLeaseLost: this member's lease expired, or no heartbeat
	// answered before it could expire. (A heartbeat that is merely late
	// pauses the partition without an event.)
	ReasonLeaseLost = "lease lost"
	// ReasonStopped: the member was stopped before it could hand off.
	ReasonStopped = "stopped"
)

// Event reports a change of a partition on a member, to Config.OnEvent.
type Event struct {
	Kind   EventKind
	Epoch  Epoch
	Reason string // for Stopped
}

// memberState is where a Member is in its life.
type memberState int

const (
	idle memberState = iota
	running
	stopped
)

// Member is one member of a fleet: it keeps its membership lease, claims the
// partitions the ring places on it, hands off the others, and runs Do's
// functions on a serial executor per owned partition. Create it with
// NewMember, Start it to join, Stop it to leave. Its methods are safe for
// concurrent use; the zero value is not usable.
type Member struct {
	cfg     Config
	ringCfg RingConfig
	store   Membership
	ringID  string
	fwd     ForwardConfig
	tel     *memberTelemetry

	life     chan struct{} // held by Start and Stop: one at a time
	state    memberState   // guarded by life
	stopped  chan struct{} // closed once stopped
	runCtx   context.Context
	cancel   context.CancelCauseFunc // ends runCtx: the loop and the lease
	loopDone chan struct{}
	wake     chan struct{} // a step is wanted now
	stepMu   sync.Mutex    // one step at a time
	wg       sync.WaitGroup

	mu          sync.RWMutex
	running     bool   // accepting calls
	lease       *lease // nil until joined
	ring        *Ring
	addrs       map[string]string
	execs       map[int]*executor
	last        map[int]*executor       // the latest executor per partition, stopped or not
	handing     map[int]bool            // partitions being drained and released
	incoming    map[int]time.Time       // handovers to this member: since when seen
	leavingFrom time.Time               // when Stop marked the member leaving
	stopWanted  bool                    // Stop was called: no Start may begin
	endStart    context.CancelCauseFunc // ends the Start in progress, if any
}

// NewMember returns a member of the fleet kept in store; Start makes it
// join. A nil cfg means the defaults. A nil store or a bad cfg give an
// error matching ErrInvalid. It does no I/O.
func NewMember(store Membership, cfg *Config) (*Member, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil membership store", ErrInvalid)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	rc := c.Ring.withDefaults()
	ring, err := newRing(nil, rc)
	if err != nil {
		return nil, err
	}
	return &Member{
		cfg: c, ringCfg: rc, store: store, ringID: ring.ID(), ring: ring, fwd: c.Forward.withDefaults(), tel: newMemberTelemetry(c),
		life: make(chan struct{}, 1), stopped: make(chan struct{}), wake: make(chan struct{}, 1),
		addrs: map[string]string{}, execs: map[int]*executor{}, last: map[int]*executor{}, handing: map[int]bool{}, incoming: map[int]time.Time{},
	}, nil
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
func (m *Member) Partition(key string) int { return partitionOf(key, m.ringCfg.Partitions) }

// Do runs fn on the serial executor of key's partition if this member owns
// it, after the functions queued before it, and returns fn's error. fn gets
// the partition's epoch: it must present it with its writes
// ([Postgres.Condition], [Postgres.Verify], [Memory.Verify]) because a pause
// can outlast the member's lease. fn's context carries ctx's values and is
// cancelled when ctx is, or when the partition is taken away and its drain
// timeout has passed (or the member's lease is lost): Do then answers an
// error matching ErrMoving, also when fn returns context.Canceled as
// database drivers do.
//
// When another member owns the key Do returns a *NotOwnerError naming it
// (forward the call there, e.g. with [Forward]); while the partition is
// moving, or this member cannot trust its lease, an error matching ErrMoving
// (retry shortly); before Start and once Stop has handed off, ErrStopped. If
// fn panics, Do returns a *PanicError (ErrPanic) and the executor runs the
// next call. If ctx ends while fn is queued, Do returns ctx's cause and fn
// does not run; if it ends while fn runs, Do returns at once and fn's result
// is lost.
func (m *Member) Do(ctx context.Context, key string, fn func(ctx context.Context, e Epoch) error) (err error) {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	p := m.Partition(key)
	ctx, span := m.tel.tracer.Start(ctx, "partition.Do")
	defer func() { m.tel.called(ctx, err); span.End(err) }()
	m.mu.RLock()
	run, x := m.running, m.execs[p]
	m.mu.RUnlock()
	if span.Recording() {
		span.Set(attribute.Int(telemetry.Partition, p), attribute.String(telemetry.Member, m.cfg.Name))
		if x != nil {
			span.Set(attribute.Int64(telemetry.Epoch, x.epoch.Token))
		}
	}
	switch {
	case !run:
		return ErrStopped
	case x == nil:
		return m.elsewhere(key, p)
	case !m.leaseSafe():
		return fmt.Errorf("%w: partition %d: membership lease not safely held", ErrMoving, p)
	}
	err = x.do(ctx, fn)
	if errors.Is(err, errNotAccepting) {
		return m.elsewhere(key, p)
	}
	return err
}

// elsewhere explains why key is not served here.
func (m *Member) elsewhere(key string, p int) error {
	m.mu.RLock()
	owner, addr, run := m.ring.Owner(p), "", m.running
	if owner != "" {
		addr = m.addrs[owner]
	}
	m.mu.RUnlock()
	if !run {
		return ErrStopped
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

func (m *Member) event(e Event) {
	m.tel.event(e)
	if m.cfg.OnEvent != nil {
		m.cfg.OnEvent(e)
	}
}

func (m *Member) warn(msg string, args ...any) {
	if m.cfg.Logger != nil {
		m.cfg.Logger.Warn(msg, append([]any{telemetry.Member, m.cfg.Name}, args...)...)
	}
}
