package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/migrate"
)

// Approach names one way of solving a scenario's problem; the names are part
// of the public JSON report.
type Approach = report.Approach

// The approaches, in report order.
const (
	Alternative         = report.Alternative
	VerifiedAlternative = report.VerifiedAlternative
	FencedLock          = report.FencedLock
	VerifiedLock        = report.VerifiedLock
	NaiveLock           = report.NaiveLock
	RedisLock           = report.RedisLock
	RedsyncLock         = report.RedsyncLock
	EtcdLock            = report.EtcdLock
	EtcdFenced          = report.EtcdFenced
	Raw                 = report.Raw
	PlainTokenLock      = report.PlainTokenLock
	BlindRetry          = report.BlindRetry
	Coalesced           = report.Coalesced
)

// approachOrder is the report order of the approaches; one not listed goes
// last, by name.
var approachOrder = []Approach{Alternative, Coalesced, VerifiedAlternative, FencedLock, VerifiedLock, NaiveLock, RedisLock, RedsyncLock, EtcdLock, EtcdFenced, Raw}

// Sizes are the sizes of a run that a scenario's schema and check depend on.
type Sizes struct {
	// Keys is how many distinct keys (rows, entities, …) the
	// clients work on.
	Keys int
	// Clients is how many clients run the approach (Config.Clients).
	Clients int
}

// Scenario is one problem that several approaches solve: its schema and seed,
// and the check of a run's history against the state it left. A Scenario is
// registered once, from an init function, and must be safe for concurrent
// use (it is a description; it holds no run's state).
type Scenario interface {
	// Name is the scenario's name on the command line and in reports.
	Name() string
	// Order places the scenario in the list of scenarios (lower first).
	Order() int
	// Description says in one line what the clients do and what must hold.
	Description() string
	// Migrations are the library schemas the approaches need, applied to
	// each run's fresh schema after fencedlock's.
	Migrations() []migrate.Migration
	// Setup creates the scenario's tables and seeds them, in a fresh
	// schema (db's search_path).
	Setup(ctx context.Context, db *pgxpool.Pool, s Sizes) error
	// Check holds ops, the merged history of every worker (warm-up
	// included), and the state the run left in db to the scenario's
	// model, and returns the checker's report. An error means nothing was
	// checked.
	Check(ctx context.Context, db *pgxpool.Pool, ops []history.Op, s Sizes) (*history.Findings, error)
}

// Sharing is a Scenario whose clients may share a worker process
// (Config.Procs below Clients): each is a request handler that picks its
// own keys, as a server runs many. A scenario whose clients each hold an
// identity of their own that faults aim at (a partition member, a
// consumer, a candidate) runs one client per process.
type Sharing interface {
	Scenario
	// SharesProcesses marks the scenario.
	SharesProcesses()
}

// Handlers is an approach whose clients share what their process holds
// (Env.Shared: a Coalescer), as a server's request handlers do: unless
// Config.Procs already runs several clients per process, its clients run
// Handlers() to a process (the most, up to that, that divides Clients and
// leaves two processes at least),
// and only the faults that hit a whole process (ProcFaults) take effect
// in it. One client per process would leave it nothing to share.
type Handlers interface {
	ApproachDef
	Handlers() int
}

// Tallier is a Scenario that sorts the operations that completed into
// kinds worth counting apart (first executions and replays of a charge):
// the report shows each kind's count among the measured operations.
type Tallier interface {
	// Kind names the kind of a completed operation, "" for none.
	Kind(op *history.Op) string
}

// Protection is what keeps a paused client of an approach from doing harm,
// as far as the lock service knows: the lease another client must wait out
// before it takes over.
type Protection struct {
	// Lease is how long another client waits before it takes over from a
	// stopped one: the lock's TTL, a member's lease, a consumer group's
	// session timeout plus its rebalance. Zero when nothing is leased: the
	// others never wait.
	Lease time.Duration
	// What names it, for reports ("the lock TTL").
	What string
	// LockService: the lease's claims and renewals go through the engine:
	// the lock service's (Env.Locks), or another service's sent with
	// Env.Claiming and Renewal (idempotency's). The late-renewal fault
	// holds those renewals.
	LockService bool
}

// LockTTL is the protection of every approach whose clients hold a lease
// of the engine's lock service (Env.Locks): the lock's TTL.
func LockTTL(p Params) Protection {
	return Protection{Lease: p.LeaseTTL, What: "the lock TTL", LockService: true}
}

// Params are the settings of a run that an approach's protection and
// clients depend on.
type Params struct {
	Sizes
	// LeaseTTL is the lease of the lock-based approaches.
	LeaseTTL time.Duration
	// OpTimeout bounds one operation.
	OpTimeout time.Duration
}

// ApproachDef is one approach to one scenario: a small type, registered once
// from an init function, whose NewClient runs in each worker process. It must
// be safe for concurrent use; the per-process state lives in the Client.
type ApproachDef interface {
	// Scenario is the name of the scenario it solves.
	Scenario() string
	// Approach is its name in reports.
	Approach() Approach
	// Label says in one line exactly what it does.
	Label() string
	// Protection is the lease that protects a stopped client of it.
	Protection(p Params) Protection
	// NewClient prepares one client, in its worker process.
	NewClient(ctx context.Context, env *Env) (Client, error)
}

// Client is one worker process's client of an approach.
type Client interface {
	// Op performs and records one operation (Env.Invoke, then the Call's
	// completion). Its error says why the operation could not be recorded
	// or the client cannot go on; an operation that failed is recorded,
	// not returned.
	Op(ctx context.Context) error
	// Close releases the client's resources.
	Close() error
}

// Drainer is a Client whose operations hand work to a pipeline that
// finishes it later (events applied by consumers). After the measured part,
// the worker calls Drain before it reports and exits: it returns once the
// pipeline has finished the work it can see, or with an error.
type Drainer interface {
	Drain(ctx context.Context) error
}

// Counter is a Client that counts what its mechanism did besides the
// operations (partitions claimed, transactions refused by a fence): the
// worker reports the counts after the run, and the report sums them over the
// workers into the result's Extra, by name.
type Counter interface {
	Counts() map[string]int64
}

var registry = struct {
	sync.RWMutex
	scenarios  map[string]Scenario
	approaches map[string][]ApproachDef
	// derived make the approaches a fault adds to the scenarios that
	// declare what it needs (the failover fault's foil): nil for a
	// scenario it does not run on.
	derived []func(Scenario) ApproachDef
}{scenarios: map[string]Scenario{}, approaches: map[string][]ApproachDef{}}

// derive adds the approach that fn returns for every registered scenario
// it does not return nil for, whenever the scenarios are registered.
func derive(fn func(Scenario) ApproachDef) {
	registry.Lock()
	defer registry.Unlock()
	registry.derived = append(registry.derived, fn)
}

// Register adds a scenario. It panics when the name is taken: registration
// happens in init functions, and a clash is a programming error.
func Register(s Scenario) {
	registry.Lock()
	defer registry.Unlock()
	if _, ok := registry.scenarios[s.Name()]; ok {
		panic(fmt.Sprintf("engine: scenario %s registered twice", s.Name()))
	}
	registry.scenarios[s.Name()] = s
	if h, ok := s.(Harmer); ok {
		report.SetHarm(s.Name(), h.Harm())
	}
}

// RegisterApproach adds an approach to its scenario, which may be registered
// before or after it. It panics when the scenario already has the approach.
func RegisterApproach(a ApproachDef) {
	registry.Lock()
	defer registry.Unlock()
	for _, b := range registry.approaches[a.Scenario()] {
		if b.Approach() == a.Approach() {
			panic(fmt.Sprintf("engine: approach %s of scenario %s registered twice", a.Approach(), a.Scenario()))
		}
	}
	registry.approaches[a.Scenario()] = append(registry.approaches[a.Scenario()], a)
}

// Scenarios returns the registered scenarios in their order.
func Scenarios() []Scenario {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]Scenario, 0, len(registry.scenarios))
	for _, s := range registry.scenarios {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Scenario) int {
		return cmp.Or(cmp.Compare(a.Order(), b.Order()), cmp.Compare(a.Name(), b.Name()))
	})
	return out
}

// Names returns the names of the registered scenarios, in their order.
func Names() []string {
	var out []string
	for _, s := range Scenarios() {
		out = append(out, s.Name())
	}
	return out
}

// Lookup returns the scenario registered as name.
func Lookup(name string) (Scenario, bool) {
	registry.RLock()
	defer registry.RUnlock()
	s, ok := registry.scenarios[name]
	return s, ok
}

// Approaches returns the approaches registered for scenario, in report
// order.
func Approaches(scenario string) []ApproachDef {
	registry.RLock()
	out := slices.Clone(registry.approaches[scenario])
	if sc, ok := registry.scenarios[scenario]; ok {
		for _, derived := range registry.derived {
			if d := derived(sc); d != nil {
				out = append(out, d)
			}
		}
	}
	registry.RUnlock()
	slices.SortFunc(out, func(a, b ApproachDef) int {
		return cmp.Or(cmp.Compare(approachRank(a.Approach()), approachRank(b.Approach())), cmp.Compare(a.Approach(), b.Approach()))
	})
	return out
}

// ApproachNames returns the name of every approach some scenario has, in
// report order.
func ApproachNames() []Approach {
	var out []Approach
	for _, sc := range Names() {
		for _, d := range Approaches(sc) {
			if !slices.Contains(out, d.Approach()) {
				out = append(out, d.Approach())
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Approach) int { return cmp.Compare(approachRank(a), approachRank(b)) })
	return out
}

// ApproachesNeeding returns the name of every approach, in report order,
// whose clients need service (Requirer).
func ApproachesNeeding(service string) []Approach {
	var out []Approach
	for _, a := range ApproachNames() {
		for _, sc := range Names() {
			d, ok := lookupApproach(sc, a)
			if req, is := d.(Requirer); ok && is && req.Service() == service {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

func approachRank(a Approach) int {
	if i := slices.Index(approachOrder, a); i >= 0 {
		return i
	}
	return len(approachOrder)
}

// lookupApproach returns the approach a of scenario.
func lookupApproach(scenario string, a Approach) (ApproachDef, bool) {
	for _, d := range Approaches(scenario) {
		if d.Approach() == a {
			return d, true
		}
	}
	return nil, false
}
