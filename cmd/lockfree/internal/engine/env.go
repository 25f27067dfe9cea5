package engine

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/fencedlock"
)

// Env is what a client runs on, in its worker process. Its fields are set
// before NewClient and never change; it is safe for concurrent use.
type Env struct {
	// Client is the worker's client number: its identity (its member and
	// holder names) and, unless it replaces a crashed worker, its lane in
	// the history.
	Client int
	Params
	// DB is the worker's pool, through the worker's own proxy when the
	// run injects network faults. A tracer counts its statements and
	// round trips: every statement of an approach must go through it.
	DB *pgxpool.Pool
	// Locks is the lock service on DB (with LISTEN/NOTIFY wake-ups) — on
	// a database of its own under the failover fault, the one that fails
	// over while DB, the resource, stays; it
	// reports each lease it grants, renews and releases for the timeline
	// and the fault injector. Lock-based approaches must use it. It is a
	// fencedlock.ValueStore too: a leader election's store (package
	// leader), its grants reported as Acquire's.
	Locks fencedlock.Store
	// Kafka lists the brokers, when the run has Kafka; KafkaDial dials a
	// broker through the worker's proxy of it (nil: dial directly).
	Kafka     []string
	KafkaDial func(ctx context.Context, network, address string) (net.Conn, error)
	// Redis is the address (host:port) of the run's Redis server, "" when
	// the run has none.
	Redis string
	// Etcd lists the endpoints (comma-separated) of the run's etcd
	// server, "" when the run has none.
	Etcd string
	// Rand is the client's random source; only the client's operations
	// (which run one at a time) may use it.
	Rand *rand.Rand
	// MeterProvider is what the client passes to the configs of the
	// lockfree components it uses (and their fenced twins' LockerConfig),
	// when the run collects metrics (Config.Metrics); nil otherwise, so
	// that nothing is recorded.
	MeterProvider metric.MeterProvider

	rec *history.Recorder
	// replacement, when set, is the client number the history of a
	// worker started in place of a crashed one is recorded under: a
	// recorder's client number is its alone.
	replacement *int
	w           *worker
}

// Lane is the client number the client's history is recorded under: its
// Client, or the lane of its own a crashed worker's replacement has.
func (e *Env) Lane() int {
	if e.replacement != nil {
		return *e.replacement
	}
	return e.Client
}

// Shared returns what the clients of the worker's process share under
// name: made by mk for the first client that asks, the same value for
// every other, as a server's request handlers share a Coalescer.
// With one client per process (Config.Procs), each client has its own.
// An error of mk is returned, and the next client to ask makes it again.
func (e *Env) Shared(name string, mk func() (any, error)) (any, error) {
	w := e.w
	w.sharedMu.Lock()
	defer w.sharedMu.Unlock()
	if v, ok := w.shared[name]; ok {
		return v, nil
	}
	v, err := mk()
	if err != nil {
		return nil, err
	}
	if w.shared == nil {
		w.shared = map[string]any{}
	}
	w.shared[name] = v
	return v, nil
}

// Recording wraps a lock service of the client's own like Locks: each lease
// it grants, renews and releases is reported.
func (e *Env) Recording(s fencedlock.Store) fencedlock.Store {
	return struct{ fencedlock.Store }{recordingLocks{Store: s, w: e.w, grants: newGrants()}}
}

// Key returns the name of key number i: prefix followed by i.
func Key(prefix string, i int) string { return prefix + strconv.Itoa(i) }

// Invoke records that the client is about to send an operation of kind on
// key, and returns the Invocation to complete and the context to run it with: the
// before-write points the operation reaches with that context are the ones
// the fault injector arms.
func (e *Env) Invoke(ctx context.Context, key, kind string, input any) (context.Context, *Invocation, error) {
	if e.w != nil {
		e.w.park(ctx, key)
	}
	call, err := e.rec.Invoke(e.Lane(), key, kind, input)
	if err != nil {
		return ctx, nil, err
	}
	op := &Invocation{call: call, key: key}
	if e.w != nil {
		e.w.invoked.Add(1)
	}
	return context.WithValue(ctx, opKey{}, op), op, nil
}

// DetachedEnv returns the Env of a client that runs in no worker, for a
// scenario's unit tests: its operations are recorded to out, its random
// source is seeded with seed, and its next operation is sent to directed
// unless that is "" (as a fault's taker is: Directed). It has no database,
// lock service or Kafka: a test sets those it needs.
func DetachedEnv(p Params, seed uint64, out io.Writer, directed string) *Env {
	w := &worker{out: &emitter{w: io.Discard}, directed: directed}
	return &Env{Params: p, Rand: rand.New(rand.NewPCG(seed, seed)), rec: history.NewRecorder(out), w: w}
}

// Directed returns, once, the key the fault injector sent the client's
// next operation to — a taker, sent to the key of a worker a fault stopped
// or cut off, so that the fault does not wait on chance for one — or ""
// when there is none. A client that picks its operations' keys asks first,
// and when it gets a key of its own kind makes its next operation on it;
// one whose keys are not its own to pick (a partition member acts on the
// entities it owns) does not ask.
func (e *Env) Directed() string {
	if e.w == nil {
		return ""
	}
	return e.w.direction()
}

// BeforeWrite is an operation's point in code that is the harness's own (a
// naive twin, a raw baseline): a before-write point, or an in-transaction
// one when name ends in ".in-tx" (Transactor). It behaves exactly like a
// failpoint.Inject of a library's point.
func (e *Env) BeforeWrite(ctx context.Context, name string) {
	if e.w != nil {
		e.w.point(ctx, name)
	}
}

// Invocation is an operation in flight, invoked with Env.Invoke: complete it once,
// with Ok or Finish. It is used by the one goroutine that runs the
// operation, except for what the lock service and the before-write points
// note on it, which is safe for concurrent use.
type Invocation struct {
	call   *history.Call
	key    string
	passed atomic.Bool  // it reached a before-write point
	took   atomic.Bool  // its effect committed (Took)
	token  atomic.Int64 // of the last lease it was granted
	task   string       // the ID of a task's background work (Env.Task)
	broken []string     // the promises it saw broken (Broke)
	// fetched and produced are a stream consumer's task's marks
	// (markFetched, markApplied).
	fetched  atomic.Bool
	produced atomic.Pointer[string]
}

type opKey struct{}

// opFrom returns the operation ctx belongs to, or nil.
func opFrom(ctx context.Context) *Invocation {
	op, _ := ctx.Value(opKey{}).(*Invocation)
	return op
}

// ID is the operation's ID in the history ("client/seq"): store it beside
// the effects it makes. It is "" for background work (Env.Background), and
// the task's own ID for a task (Env.Task).
func (o *Invocation) ID() string {
	if o.call == nil {
		return o.task
	}
	return o.call.ID()
}

// Background returns the context of work on key that is no operation of
// the history — a consumer applying events in the background: the
// before-write points it reaches with that context are armed like an
// operation's, and the leases it takes are reported on key.
func (e *Env) Background(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, opKey{}, &Invocation{key: key})
}

// Task returns the context of background work on key, like Background,
// whose effect is decided later (a consumer's transaction, committed or
// refused by the library after the harness's handler returned), with token
// the lease or epoch it works under (0 for unknown): done, called once the
// effect is decided, tells the fault injector, which waits for a stopped
// task to end before it lets the worker that took its key over go on. The
// worker reports the end as the task's completion; done may be called more
// than once.
func (e *Env) Task(ctx context.Context, key string, token int64) (context.Context, func()) {
	op := &Invocation{key: key}
	op.token.Store(token)
	if e.w == nil {
		return context.WithValue(ctx, opKey{}, op), func() {}
	}
	op.task = "task-" + strconv.Itoa(e.Lane()) + "-" + strconv.FormatInt(e.w.tasks.Add(1), 10)
	var once sync.Once
	return context.WithValue(ctx, opKey{}, op), func() {
		once.Do(func() {
			ev := event{Ev: evDone, T: history.Now(), Key: key, Op: op.task}
			if by := op.produced.Load(); by != nil {
				ev.Produced = *by
			}
			_ = e.w.out.event(ev)
		})
	}
}

// MarkFetched marks the task of ctx as one whose worker holds events it
// fetched from a stream and has written nothing of them yet: its
// before-write point fires an arm for Fetched (the overtake fault).
func MarkFetched(ctx context.Context) {
	if op := opFrom(ctx); op != nil {
		op.fetched.Store(true)
	}
}

// MarkApplied marks the task of ctx as the application of an event that
// the operation by produced ("" for none): its end reports by.
func MarkApplied(ctx context.Context, by string) {
	if op := opFrom(ctx); op != nil {
		op.produced.Store(&by)
	}
}

// Evidence is what a client's mechanism reports besides its operations — a
// lease granted, renewed or released, a partition membership, claim or call
// — for the fault injector, the timeline and the exclusivity check
// (tenures.go).
type Evidence struct {
	// Kind is what happened.
	Kind EvidenceKind
	// Key is the scenario's key it concerns; "" for the key of the
	// operation or task of the context it is reported with.
	Key string
	// Name names the lease: a lock's name, a member's, "partition/N".
	Name string
	// Token is the lease's fencing token, or the ownership's epoch; a
	// lease with no token (a Redis lock) reports a negative number.
	Token int64
	TTL   time.Duration
	// Sent is when the request that made it was sent; zero when not known,
	// and then the exclusivity check does not judge it.
	Sent history.Time
	// Incarnation is, for a claim, the membership lease it was made under.
	Incarnation int64
	// Uncertain marks a request whose answer never came (an error after
	// it was sent, Uncertain): it may have taken effect. A grant so marked
	// starts no lease the check counts on, a renewal extends none, and
	// after a release or a leave the lease is no longer certainly in force
	// from Sent, but it is no release the service is known to have made.
	Uncertain bool
}

// EvidenceKind says what a piece of Evidence reports.
type EvidenceKind string

// The kinds of evidence.
const (
	Granted  EvidenceKind = evLease   // a lease granted
	Renewed  EvidenceKind = evRenew   // a lease renewed
	Released EvidenceKind = evRelease // a lease released, or ended by its holder
	Joined   EvidenceKind = evMember  // a membership lease granted or extended
	Left     EvidenceKind = evLeave   // a membership lease ended
	Claimed  EvidenceKind = evClaim   // a partition claimed: Name "partition/N", Token its epoch
	Disowned EvidenceKind = evDisown  // a partition released while its epoch was current
	Acted    EvidenceKind = evAct     // a call began under an ownership
	Refused  EvidenceKind = evRefuse  // a call's write under an ownership was refused as stale
)

// Report reports ev, when the client runs in a worker, with the operation
// or task of ctx it belongs to; a grant with a fencing token is noted on
// that operation (Invocation.Token). It is evidence for the fault injector, the
// timeline and the checks only: a worker whose output is gone is halted by
// its run loop.
func (e *Env) Report(ctx context.Context, ev Evidence) {
	if e.w == nil {
		return
	}
	out := event{Ev: string(ev.Kind), T: history.Now(), Key: ev.Key, Name: ev.Name, Token: ev.Token, TTL: ev.TTL,
		Sent: ev.Sent, Incarnation: ev.Incarnation, Uncertain: ev.Uncertain}
	if op := opFrom(ctx); op != nil {
		if out.Key == "" {
			out.Key = op.key
		}
		out.Op = op.ID()
		if ev.Kind == Granted && ev.Token > 0 && !ev.Uncertain {
			op.token.Store(ev.Token)
		}
	}
	_ = e.w.out.event(out)
}

// Token is the fencing token of the last lease the operation was granted
// through Env.Locks, or noted with Holds; 0 for none.
func (o *Invocation) Token() int64 { return o.token.Load() }

// Holds notes token as the fencing token the operation writes under when
// its lease was granted before it began (a leader's term, kept across
// operations): its before-write points report it, as they report a lease
// granted within the operation.
func (o *Invocation) Holds(token int64) { o.token.Store(token) }

// Key is the key the operation was invoked on.
func (o *Invocation) Key() string { return o.key }

// ReachedWrite records that the operation has reached its write, as a
// before-write point does: an error from here on may come after its effect
// (Finish).
func (o *Invocation) ReachedWrite() { o.passed.Store(true) }

// Set attaches a note to the operation ("retries").
func (o *Invocation) Set(key, value string) { o.call.Set(key, value) }

// Took records that the operation's effect committed — the transaction
// that made it returned from COMMIT — before the operation's other steps
// (storing a record, releasing a lock) ran. Whatever error the operation
// then ends with, nothing undoes the effect: Finish records it as of
// unknown outcome, never as a failure, so that the check does not take the
// effect for one made by a refused operation.
func (o *Invocation) Took() { o.took.Store(true) }

// Ok records that the operation completed with output.
func (o *Invocation) Ok(output any) error { return o.call.Ok(output) }

// MetaRefused marks an operation the mechanism refused (a fenced write, a
// conflict): a certain failure that is the mechanism doing its job.
const MetaRefused = "refused"

// Finish completes the operation from its result: Ok(output) when err is
// nil; unknown when its effect committed (Took) and a later step failed;
// a certain failure, noted as refused, when err is one of refusals;
// a certain failure when err came before the operation reached its
// before-write point — every approach's effect is the write after it, so
// nothing took effect; otherwise as history.Classify says.
func (o *Invocation) Finish(output any, err error, refusals ...error) error {
	switch {
	case err == nil:
		return o.call.Ok(output)
	case o.took.Load():
		return o.call.Unknown(err)
	case isAny(err, refusals):
		o.call.Set(MetaRefused, "true")
		return o.call.Fail(err)
	case !o.passed.Load():
		return o.call.Fail(err)
	}
	return o.call.Finish(nil, err)
}

func isAny(err error, targets []error) bool {
	for _, t := range targets {
		if t != nil && errors.Is(err, t) {
			return true
		}
	}
	return false
}
