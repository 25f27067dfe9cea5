package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/short"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/replpair"
)

// ErrNotInjected is matched by the error of a run in which a requested
// fault took effect not once for some approach: such a run proves nothing
// about that fault, and must not pass for one that does.
var ErrNotInjected = errors.New("engine: a requested fault was not injected")

// ErrApproachFailed is matched by the error of a run in which some
// approach's run could not be made (its workers did not get ready, its
// schema could not be set up, …): the report holds that approach as a
// Failed result, with why, and the run went on with the next approach.
var ErrApproachFailed = errors.New("engine: an approach's run failed")

// ErrInvalid is matched by the errors of a bad configuration, returned
// before anything runs.
var ErrInvalid = errors.New("engine: invalid argument")

// Config describes a run. The zero value is the defaults.
type Config struct {
	// Clients is how many clients run each approach. Defaults to 8.
	Clients int
	// Procs is how many worker processes run them: Clients/Procs clients
	// each, as a server runs many request handlers in one process (they
	// share its pool, its lock service and what Env.Shared gives them,
	// and a pause stops them all). It must divide Clients, and below
	// Clients it needs a scenario whose clients may share a process
	// (Sharing) and faults that hit a process (procFaults). 0 means
	// Clients: one client per process.
	Procs int
	// Keys is how many distinct keys the clients work on. Defaults to 1.
	Keys int
	// Duration is how long each approach is measured. Defaults to 5s.
	Duration time.Duration
	// Warmup is how long each worker runs before the measured part, its
	// operations recorded and checked, not measured. Defaults to a fifth
	// of Duration, at most 1s.
	Warmup time.Duration
	// Faults are injected while each approach is measured.
	Faults []Fault
	// MinFaults is how many times each fault asked for takes effect
	// before a run ends: a run goes on past Duration (for at most
	// max(Duration, 20s) more) until it has. Defaults to 1. A fault whose
	// victims are picked round-robin reaches its second worker only at
	// its second injection: a mutant run sets 2, so that a short run tries
	// the paths of two workers. Faults that settle (failover, crash's
	// restarts) count as their own rule says.
	MinFaults int
	// LeaseTTL is the lease of the lock-based approaches. Defaults to
	// 250ms.
	LeaseTTL time.Duration
	// OpTimeout bounds one operation. Defaults to 2s plus twice the lease
	// that protects the approach, so that an operation outlasts a fault
	// that holds it past that lease.
	OpTimeout time.Duration
	// Approaches, when set, restricts a run to these approaches (in the
	// scenario's order).
	Approaches []Approach
	// Seed seeds the workers' random sources. Defaults to a random seed.
	Seed uint64
	// At is where the faults that stop a worker at a point (pause, stall,
	// isolate, delay, crash) stop it: AtBeforeWrite, or AtInTx, between a
	// BEGIN and its COMMIT, in the approaches that have such a point
	// (Transactor; the others are skipped). Random draws it per injection
	// instead. Defaults to AtBeforeWrite.
	At string
	// KillBrokers lets the random schedules of the approaches that use
	// Kafka (KafkaUser) draw one broker-kill each, at a time drawn; the
	// run needs Infra.Brokers. Without it no schedule kills a broker.
	KillBrokers bool
	// Keep, under the fault random, plays only these injections of each
	// drawn schedule, by their number in the draw (report.Injection.N);
	// nil plays them all. Numbers past a draw's end keep nothing.
	Keep []int
	// Env is added to every worker's environment (LOCKFREE_MUTANTS=… for
	// a mutant run).
	Env []string
	// Executable is the binary to run workers with, which must call
	// WorkerMain when IsWorker. Defaults to this process's binary.
	Executable string
	// Args are the workers' arguments. Defaults to none; a test binary
	// needs none either, as its TestMain runs the worker before parsing
	// flags.
	Args []string
	// Stderr receives the workers' stderr. Defaults to none (the last
	// lines of a worker that died are reported).
	Stderr io.Writer
	// Progress receives a line per second while a run goes on, and the
	// harness's messages. Optional.
	Progress io.Writer
	// Live, when set, follows each approach's run instead of Progress.
	Live report.Progress
	// Metrics, when set, has each worker give its client an SDK
	// MeterProvider, which the approach passes to every lockfree component
	// it uses; each Result then holds what they recorded, merged over the
	// workers (report.Result.Metrics).
	Metrics bool
	// Hits, when set, is called after each approach's run with how often
	// its workers reached each failpoint site (summed), so that a mutant
	// run can prove it exercised its mutant. Optional.
	Hits func(a Approach, hits map[string]int64)
}

// Infra is where a run runs.
type Infra struct {
	// URL of the PostgreSQL database. Required.
	URL string
	// Restart stops and starts the server (the restart fault); nil when
	// it cannot be restarted from here.
	Restart func(ctx context.Context) error
	// Kafka brokers, when there are.
	Kafka []string
	// Brokers kills and starts Kafka's nodes (the broker-kill fault); nil
	// when they cannot be controlled from here.
	Brokers Brokers
	// Redis is the address of the Redis server the redis-lock approaches
	// take their locks in: host:port, or redis://:password@host:port (see
	// localredis.Options); without one they are skipped.
	Redis string
	// Etcd lists the endpoints (comma-separated) of the etcd server the
	// etcd-lock approaches take their locks in; without one they are
	// skipped.
	Etcd string
	// Failover is a primary with a streaming standby that the failover
	// fault fails over: the lock service's database, beside URL's, which
	// keeps the rows. Required by that fault; each approach's run finds it
	// healthy again.
	Failover *replpair.Pair
}

func (c Config) withDefaults() Config {
	if c.Clients == 0 {
		c.Clients = 8
	}
	if c.Keys == 0 {
		c.Keys = 1
	}
	if c.Duration == 0 {
		c.Duration = 5 * time.Second
	}
	if c.Warmup == 0 {
		c.Warmup = min(time.Second, c.Duration/5)
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 250 * time.Millisecond
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if c.MinFaults == 0 {
		c.MinFaults = 1
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Clients < 1 || c.Clients > 256:
		return fmt.Errorf("%w: %d clients (want 1 to 256)", ErrInvalid, c.Clients)
	case c.Procs < 0 || c.Procs > c.Clients || c.Procs > 0 && c.Clients%c.Procs != 0:
		return fmt.Errorf("%w: %d clients in %d processes (want a number of processes that divides the clients)", ErrInvalid, c.Clients, c.Procs)
	case c.Keys < 1:
		return fmt.Errorf("%w: %d keys", ErrInvalid, c.Keys)
	case c.Duration < 100*time.Millisecond || c.Warmup < 0:
		return fmt.Errorf("%w: duration %v (want ≥ 100ms), warm-up %v", ErrInvalid, c.Duration, c.Warmup)
	case c.LeaseTTL < 0 || c.OpTimeout < 0:
		return fmt.Errorf("%w: negative lease or operation timeout", ErrInvalid)
	case c.MinFaults < 0:
		return fmt.Errorf("%w: %d faults at least (want ≥ 0)", ErrInvalid, c.MinFaults)
	}
	for _, f := range c.Faults {
		if _, ok := faultByName(f); !ok {
			return fmt.Errorf("%w: unknown fault %s", ErrInvalid, f)
		}
	}
	if contains(c.Faults, Random) && len(c.Faults) > 1 {
		return fmt.Errorf("%w: faults %s: random draws its faults, and goes alone", ErrInvalid, report.FaultList(c.Faults))
	}
	if c.lanes() > 1 {
		for _, f := range c.Faults {
			if !slices.Contains(procFaults, f) {
				return fmt.Errorf("%w: fault %s with several clients per process: want one of %s", ErrInvalid, f, report.FaultList(procFaults))
			}
		}
	}
	if c.At != "" && c.At != AtBeforeWrite && c.At != AtInTx {
		return fmt.Errorf("%w: at %s: want %s or %s", ErrInvalid, short.Quote(c.At), AtBeforeWrite, AtInTx)
	}
	if c.At == AtInTx && contains(c.Faults, Random) {
		return fmt.Errorf("%w: at %s: random draws where each injection stops its worker", ErrInvalid, AtInTx)
	}
	if c.Keep != nil && !contains(c.Faults, Random) {
		return fmt.Errorf("%w: injections to keep, yet no random schedule to keep them of", ErrInvalid)
	}
	for i, n := range c.Keep {
		if n < 0 || i > 0 && n <= c.Keep[i-1] {
			return fmt.Errorf("%w: injections to keep %s: want numbers from 0, increasing", ErrInvalid, report.IntList(c.Keep))
		}
	}
	return nil
}

// check refuses a run that cannot be made on infra, before anything runs.
func (c Config) check(infra Infra) error {
	if err := c.validate(); err != nil {
		return err
	}
	if infra.URL == "" {
		return fmt.Errorf("%w: the harness needs PostgreSQL (Infra.URL)", ErrInvalid)
	}
	for _, f := range c.Faults {
		k, _ := faultByName(f)
		if ch, ok := k.(checking); ok {
			if err := ch.check(c, infra); err != nil {
				return err
			}
		}
	}
	return nil
}

// Run runs every approach of sc, one after the other, under cfg's faults,
// and checks each one's history. It returns the report, and with it an
// error matching ErrNotInjected when a requested fault took effect not once
// in some approach's run, and one matching ErrApproachFailed for each
// approach whose run could not be made (the others ran); any other error
// means the run could not be made at all (a bad configuration, ctx ended).
func Run(ctx context.Context, sc Scenario, cfg Config, infra Infra) (report.Report, error) {
	cfg = cfg.withDefaults()
	rep := report.Report{Scenario: sc.Name(), Backend: "postgres", Clients: cfg.Clients, Keys: cfg.Keys,
		DurationS: cfg.Duration.Seconds(), Faults: append([]Fault{}, cfg.Faults...), FaultHow: map[Fault]string{}}
	if cfg.lanes() > 1 {
		rep.Procs = cfg.procs()
	}
	if err := cfg.check(infra); err != nil {
		return rep, err
	}
	if !SharesProcesses(sc) && cfg.lanes() > 1 {
		return rep, fmt.Errorf("%w: scenario %s runs one client per process (%d clients in %d processes asked)", ErrInvalid, sc.Name(), cfg.Clients, cfg.Procs)
	}
	for _, f := range cfg.Faults {
		rep.FaultHow[f] = howAt(FaultHow(f), cfg.At, f)
	}
	if contains(cfg.Faults, Random) {
		rep.Seed = cfg.Seed
	}
	var missed []error
	for _, def := range Approaches(sc.Name()) {
		if cfg.Approaches != nil && !slices.Contains(cfg.Approaches, def.Approach()) {
			continue
		}
		acfg := cfg.forApproach(def)
		if why := skipReason(ctx, acfg, def, infra); why != "" {
			rep.Results = append(rep.Results, report.Result{Approach: def.Approach(), Label: def.Label(), Skipped: why})
			continue
		}
		res, abort, err := runOne(ctx, sc, def, acfg, infra, &rep)
		if abort {
			return rep, err
		}
		missed = append(missed, err)
		rep.Results = append(rep.Results, res)
	}
	return rep, errors.Join(missed...)
}

// runOne runs def and returns its line of the report, with its notes added
// to rep's, and an error matching ErrApproachFailed when its run could not
// be made (the line then says why), or ErrNotInjected for each fault that
// took effect not once in it; abort when ctx ended the run, and the error
// is the whole run's.
func runOne(ctx context.Context, sc Scenario, def ApproachDef, cfg Config, infra Infra, rep *report.Report) (_ report.Result, abort bool, _ error) {
	r, res, err := runApproach(ctx, sc, def, cfg, infra)
	for _, n := range r.log.notesSoFar() {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %s", def.Approach(), n))
	}
	if err != nil {
		if ctx.Err() != nil {
			return res, true, fmt.Errorf("%s/%s: %w", sc.Name(), def.Approach(), err)
		}
		failed := report.Result{Approach: def.Approach(), Label: def.Label(), Failed: err.Error()}
		return failed, false, fmt.Errorf("%w: %s/%s: %w", ErrApproachFailed, sc.Name(), def.Approach(), err)
	}
	if cfg.Hits != nil {
		cfg.Hits(def.Approach(), r.fleet.stats().Hits)
	}
	var missed []error
	for _, f := range cfg.Faults {
		if res.FaultsInjected[f] == 0 {
			missed = append(missed, fmt.Errorf("%w: %s/%s: %s took effect not once", ErrNotInjected, sc.Name(), def.Approach(), f))
		}
	}
	return res, false, errors.Join(missed...)
}

// skipReason says why def cannot run under cfg's faults on infra, or "": a
// fault that cannot take effect in it, a foil without its fault, Kafka
// brokers a KafkaUser needs that do not answer, a service a Requirer needs.
func skipReason(ctx context.Context, cfg Config, def ApproachDef, infra Infra) string {
	if why := skipForFaults(cfg, def); why != "" {
		return why
	}
	if _, ok := def.(KafkaUser); ok {
		if why := kafkaSkip(ctx, infra); why != "" {
			return why
		}
	}
	if req, ok := def.(Requirer); ok {
		return req.Unavailable(ctx, infra)
	}
	return ""
}

// run is one approach's run, seen from the coordinator: its settings, its
// workers, the monitor that follows them, the log of what happened, and
// the injectors of its faults, each with its own state.
type run struct {
	cfg    Config
	infra  Infra
	sc     Scenario
	def    ApproachDef
	params Params
	prot   Protection
	fleet  *fleet
	mon    *monitor
	log    *runLog
	// injectors are the faults' parts in the run, in cfg.Faults' order.
	injectors []injector
	// lockDB, when set, is where the workers' lock service lives instead
	// of their database: a fault's (the failover pair).
	lockDB string
	task   report.Task // the live progress of the run, when followed
	// admin is the harness's pool in the run's schema; tag names the
	// run's database sessions (sessionName), for blockedBy.
	admin *pgxpool.Pool
	tag   string
	// topic is a KafkaUser's topic for the run.
	topic string
}

// newRun readies def's run: its settings, its empty fleet, its injectors.
func newRun(sc Scenario, def ApproachDef, cfg Config, infra Infra) *run {
	r := &run{cfg: cfg, infra: infra, sc: sc, def: def, mon: newMonitor(), log: newRunLog()}
	r.mon.workerOf = cfg.workerOf
	r.fleet = &fleet{cfg: cfg, mon: r.mon}
	r.params = Params{Sizes: Sizes{Keys: cfg.Keys, Clients: cfg.Clients}, LeaseTTL: cfg.LeaseTTL, OpTimeout: cfg.OpTimeout}
	r.prot = def.Protection(r.params)
	if r.params.OpTimeout == 0 {
		r.params.OpTimeout = 2*time.Second + 2*r.prot.Lease
		for _, f := range cfg.Faults {
			if k, ok := faultByName(f); ok {
				if l, ok := k.(lengthening); ok {
					r.params.OpTimeout += l.opTimeout()
				}
			}
		}
	}
	for _, f := range cfg.Faults {
		k, _ := faultByName(f)
		r.injectors = append(r.injectors, k.start(r))
	}
	return r
}

// runApproach runs one approach: schema, workers, faults, check.
func runApproach(ctx context.Context, sc Scenario, def ApproachDef, cfg Config, infra Infra) (*run, report.Result, error) {
	r := newRun(sc, def, cfg, infra)
	sizes := r.params.Sizes
	sch, err := newSchema(ctx, infra.URL, sc, def.Approach(), sizes)
	if err != nil {
		return r, report.Result{}, err
	}
	defer sch.drop()
	r.admin, r.tag = sch.admin, sch.Name[max(0, len(sch.Name)-8):]
	undo, err := r.prepare(ctx, sch.Name)
	defer undo()
	if err != nil {
		return r, report.Result{}, err
	}
	defer r.fleet.cleanup()
	unwatch := r.log.watchWall()
	defer unwatch()
	if err := r.start(ctx, sch.url); err != nil {
		return r, report.Result{}, err
	}
	window, err := r.measure(ctx)
	unwatch()
	if err != nil {
		return r, report.Result{}, err
	}
	res, err := r.result(ctx, sch, window)
	return r, res, err
}

// prepare readies what the run needs besides its schema, before the
// workers start: a KafkaUser's topic, a fault's infrastructure. It returns
// what undoes all it did, in reverse order, which the caller runs whatever
// the error.
func (r *run) prepare(ctx context.Context, schema string) (func(), error) {
	var undos []func()
	undo := func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}
	if k, ok := r.def.(KafkaUser); ok {
		r.topic = k.KafkaTopic(schema)
		u, err := prepareTopic(ctx, r.infra, r.topic, r.cfg.Clients)
		if err != nil {
			return undo, err
		}
		undos = append(undos, u)
	}
	for _, inj := range r.injectors {
		if p, ok := inj.(preparing); ok {
			u, err := p.prepare(ctx, schema)
			if err != nil {
				return undo, err
			}
			undos = append(undos, u)
		}
	}
	return undo, nil
}

// start starts the workers, each through its own proxies when the run
// injects network faults, and waits until every one has warmed up.
func (r *run) start(ctx context.Context, url string) error {
	network := slices.ContainsFunc(r.cfg.Faults, func(f Fault) bool { k, _ := faultByName(f); _, ok := k.(networked); return ok })
	var brokers []string // the advertised brokers a worker of a Kafka approach reaches through its proxies
	if _, ok := r.def.(KafkaUser); ok && network {
		var err error
		if brokers, err = advertisedBrokers(ctx, r.infra.Kafka); err != nil {
			return err
		}
	}
	r.log.base = history.Now()
	for w := range r.cfg.procs() {
		wc := workerConfig{Scenario: r.sc.Name(), Approach: r.def.Approach(), Client: w * r.cfg.lanes(), Lanes: r.cfg.lanes(), DB: url,
			LockDB: r.lockDB, Kafka: r.infra.Kafka, Redis: r.infra.Redis, Etcd: r.infra.Etcd, Params: r.params, Warmup: r.cfg.Warmup, Seed: r.cfg.Seed,
			Metrics: r.cfg.Metrics, Run: r.tag}
		if err := r.fleet.startWorker(wc, network, brokers); err != nil {
			return err
		}
	}
	return r.fleet.ready(ctx, r.cfg.Warmup+r.params.OpTimeout+StartBound(r.cfg.Clients)+30*time.Second)
}

// StartBound bounds how long a fleet of clients workers takes to start and
// settle (a fleet of partition members on their partitions, every worker's
// first connections): a minute, and a second more per worker — the last of
// 64 worker processes starting on two loaded cores begins tens of seconds
// after the first, and each member that joins moves partitions again.
func StartBound(clients int) time.Duration {
	return time.Minute + time.Duration(clients)*time.Second
}

// window is the measured part of a run, on the history clock.
type window struct{ from, to history.Time }

// measure starts the measured part, injects the faults while it lasts,
// halts the workers and waits for them to exit.
func (r *run) measure(ctx context.Context) (window, error) {
	w := window{from: history.Now()}
	for _, p := range r.fleet.all() {
		p.command(command{Cmd: cmdGo})
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		r.last(runCtx)
		stop()
	}()
	progress := r.follow(runCtx)
	r.inject(runCtx)
	<-runCtx.Done()
	w.to = history.Now()
	<-progress
	// Half a minute, and a second more per worker: after the halt a
	// pipeline's workers drain (64 consumers of one group on a loaded
	// machine rebalance for over 40 s), and a worker killed while draining
	// leaves work it never finished, which the check counts.
	bound := r.params.OpTimeout + 30*time.Second + time.Duration(r.cfg.Clients)*time.Second
	if err := r.fleet.halt(ctx, bound, r.log); err != nil {
		return w, err
	}
	return w, nil
}

// last returns once the run's duration has passed and every fault asked
// for has taken effect at least MinFaults times, or once overtime() more
// has passed:
// a short run's few chances at a fault can all miss (the worker reached no
// before-write point in time, sent nothing into a cut), a failover can take
// longer than the run on a loaded machine, and a run in which a fault asked
// for took effect not once proves nothing about it. Ops/s are over the run
// as it lasted.
func (r *run) last(ctx context.Context) {
	if !Sleep(ctx, r.cfg.Duration) {
		return
	}
	from := time.Now()
	for !r.faultsDone() {
		if time.Since(from) >= r.overtime() {
			return // Run reports the fault that never took effect
		}
		if !Sleep(ctx, 20*time.Millisecond) {
			return
		}
	}
	if d := time.Since(from); d >= 20*time.Millisecond {
		r.log.note("the run went on %v past its duration, until every fault asked for had taken effect %s", d.Round(100*time.Millisecond), history.Times(r.cfg.MinFaults))
	}
}

// overtime bounds how long a run goes on past its duration for a fault
// that has not yet taken effect.
func (r *run) overtime() time.Duration { return max(r.cfg.Duration, 20*time.Second) }

// faultsDone reports whether every fault asked for has taken effect at
// least MinFaults times, or as a settling fault says.
func (r *run) faultsDone() bool {
	for i, f := range r.cfg.Faults {
		if s, ok := r.injectors[i].(settledRun); ok {
			if !s.settled() {
				return false
			}
			continue
		}
		k, _ := faultByName(f)
		if s, ok := k.(settling); ok {
			if !s.done(r.log.injectedOf) {
				return false
			}
			continue
		}
		if r.log.injectedOf(f) < int64(r.cfg.MinFaults) {
			return false
		}
	}
	return true
}

// follow reports the run's progress every second until ctx ends.
func (r *run) follow(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if r.cfg.Live != nil {
		r.task = r.cfg.Live.Start(r.sc.Name(), r.def.Approach(), r.cfg.Duration)
	}
	task := r.task
	go func() {
		defer close(done)
		start := time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			ended := false
			select {
			case <-ctx.Done():
				ended = true
			case <-tick.C:
			}
			ops := r.mon.okRunning()
			switch {
			case task != nil:
				task.Update(ops, r.log.faults())
			case r.cfg.Progress != nil:
				fmt.Fprintf(r.cfg.Progress, "%s/%s: %d ops after %.0fs\n", r.sc.Name(), r.def.Approach(), ops, time.Since(start).Seconds())
			}
			if ended {
				return
			}
		}
	}()
	return done
}
