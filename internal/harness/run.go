package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/replpair"
	"github.com/lockfree-go/lockfree/internal/report"
)

// ErrNotInjected is matched by the error of a run in which a requested
// fault took effect not once for some approach: such a run proves nothing
// about that fault, and must not pass for one that does.
var ErrNotInjected = errors.New("harness: a requested fault was not injected")

// ErrApproachFailed is matched by the error of a run in which some
// approach's run could not be made (its workers did not get ready, its
// schema could not be set up, …): the report holds that approach as a
// Failed result, with why, and the run went on with the next approach.
var ErrApproachFailed = errors.New("harness: an approach's run failed")

// ErrInvalid is matched by the errors of a bad configuration, returned
// before anything runs.
var ErrInvalid = errors.New("harness: invalid argument")

// Config describes a run. The zero value is the defaults.
type Config struct {
	// Clients is how many worker processes run each approach, one client
	// each. Defaults to 8.
	Clients int
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
	// Redis is the address of the Redis server the redis-lock approaches
	// take their locks in: host:port, or redis://:password@host:port (see
	// localredis.Options); without one they are skipped.
	Redis string
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
	return c
}

func (c Config) validate() error {
	switch {
	case c.Clients < 1 || c.Clients > 256:
		return fmt.Errorf("%w: %d clients (want 1 to 256 worker processes)", ErrInvalid, c.Clients)
	case c.Keys < 1:
		return fmt.Errorf("%w: %d keys", ErrInvalid, c.Keys)
	case c.Duration < 100*time.Millisecond || c.Warmup < 0:
		return fmt.Errorf("%w: duration %v (want ≥ 100ms), warm-up %v", ErrInvalid, c.Duration, c.Warmup)
	case c.LeaseTTL < 0 || c.OpTimeout < 0:
		return fmt.Errorf("%w: negative lease or operation timeout", ErrInvalid)
	}
	for _, f := range c.Faults {
		if _, ok := faultByName(f); !ok {
			return fmt.Errorf("%w: unknown fault %s", ErrInvalid, f)
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
	if err := cfg.validate(); err != nil {
		return rep, err
	}
	if infra.URL == "" {
		return rep, fmt.Errorf("%w: the harness needs PostgreSQL (Infra.URL)", ErrInvalid)
	}
	if err := checkFailover(cfg, infra); err != nil {
		return rep, err
	}
	for _, f := range cfg.Faults {
		k, _ := faultByName(f)
		rep.FaultHow[f] = k.how
	}
	var missed []error
	for _, def := range Approaches(sc.Name()) {
		if cfg.Approaches != nil && !slices.Contains(cfg.Approaches, def.Approach()) {
			continue
		}
		why := skipForFaults(cfg, def)
		if why == "" {
			why = skipReason(ctx, def, infra)
		}
		if why != "" {
			rep.Results = append(rep.Results, report.Result{Approach: def.Approach(), Label: def.Label(), Skipped: why})
			continue
		}
		r, res, err := runApproach(ctx, sc, def, cfg, infra)
		for _, n := range r.notes {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %s", def.Approach(), n))
		}
		if err != nil {
			if ctx.Err() != nil {
				return rep, fmt.Errorf("%s/%s: %w", sc.Name(), def.Approach(), err)
			}
			rep.Results = append(rep.Results, report.Result{Approach: def.Approach(), Label: def.Label(), Failed: err.Error()})
			missed = append(missed, fmt.Errorf("%w: %s/%s: %w", ErrApproachFailed, sc.Name(), def.Approach(), err))
			continue
		}
		if cfg.Hits != nil {
			cfg.Hits(def.Approach(), r.stats().Hits)
		}
		for _, f := range cfg.Faults {
			if res.FaultsInjected[f] == 0 {
				missed = append(missed, fmt.Errorf("%w: %s/%s: %s took effect not once", ErrNotInjected, sc.Name(), def.Approach(), f))
			}
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, errors.Join(missed...)
}

// run is one approach's run, seen from the coordinator.
type run struct {
	cfg    Config
	infra  Infra
	sc     Scenario
	def    ApproachDef
	params Params
	prot   Protection
	procs  []*proc
	mon    *monitor
	base   history.Time // when the workers were started: 0s on the timeline
	// lockURL is the workers' lock service under the failover fault.
	lockURL string
	task    report.Task // the live progress of the run, when followed

	mu       sync.Mutex
	injected map[Fault]int64
	notes    []string
	spans    map[int][]report.Span // by client
	global   []report.Span
	// idle: the worker the injector is after completed no operation
	// lately.
	idle bool
	// forgot lists when a fault made the lock service forget the leases
	// it had granted (a failover that lost their WAL): the exclusivity
	// check ends every tenure granted before at that moment.
	forgot []history.Time
	// cuts lists, by client, when a network fault held the worker's
	// traffic (noteCut): what it sent then reached no server before.
	cuts map[int][]cut
	// replaced maps the lane of each worker started in place of a crashed
	// one to the client it runs as (crashOnce).
	replaced map[int]int
}

func (r *run) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *run) count(f Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.injected[f]++
}

func (r *run) span(client int, kind report.SpanKind, from, to history.Time, label string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := report.Span{Kind: kind, Start: r.seconds(from), End: r.seconds(to), Label: label}
	if client < 0 {
		r.global = append(r.global, s)
		return
	}
	r.spans[client] = append(r.spans[client], s)
}

// seconds converts a history time to seconds on the timeline.
func (r *run) seconds(t history.Time) float64 { return float64(t-r.base) / 1e9 }

// runApproach runs one approach: schema, workers, faults, check.
func runApproach(ctx context.Context, sc Scenario, def ApproachDef, cfg Config, infra Infra) (*run, report.Result, error) {
	sizes := Sizes{Keys: cfg.Keys, Clients: cfg.Clients}
	r := &run{cfg: cfg, infra: infra, sc: sc, def: def, mon: newMonitor(),
		injected: map[Fault]int64{}, spans: map[int][]report.Span{}, replaced: map[int]int{}}
	r.params = Params{Sizes: sizes, LeaseTTL: cfg.LeaseTTL, OpTimeout: cfg.OpTimeout}
	r.prot = def.Protection(r.params)
	if r.params.OpTimeout == 0 {
		r.params.OpTimeout = 2*time.Second + 2*r.prot.Lease
	}
	if cfg.OpTimeout == 0 && slices.Contains(cfg.Faults, Failover) {
		r.params.OpTimeout += failoverOpTimeout
	}
	sch, err := newSchema(ctx, infra.URL, sc, def.Approach(), sizes)
	if err != nil {
		return r, report.Result{}, err
	}
	defer sch.drop()
	if p, ok := def.(Preparer); ok {
		undo, err := p.Prepare(ctx, infra, sch.Name, sizes)
		if err != nil {
			return r, report.Result{}, err
		}
		defer undo()
	}
	if infra.Failover != nil && slices.Contains(cfg.Faults, Failover) {
		var drop func()
		if r.lockURL, drop, err = r.lockSchema(ctx, sch.Name); err != nil {
			return r, report.Result{}, err
		}
		defer drop()
	}
	defer r.cleanup()
	if err := r.start(ctx, sch.url); err != nil {
		return r, report.Result{}, err
	}
	window, err := r.measure(ctx)
	if err != nil {
		return r, report.Result{}, err
	}
	res, err := r.result(ctx, sch, window)
	return r, res, err
}

// start starts the workers, each through its own proxy when the run
// injects network faults, and waits until every one has warmed up.
func (r *run) start(ctx context.Context, url string) error {
	exe := r.cfg.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("harness: finding the worker binary: %w", err)
		}
	}
	network := slices.ContainsFunc(r.cfg.Faults, func(f Fault) bool { k, _ := faultByName(f); return k.network })
	var brokers []string // the advertised brokers a worker of a Kafka approach reaches through its proxies
	if _, ok := r.def.(kafkaApproach); ok && network {
		var err error
		if brokers, err = advertisedBrokers(ctx, r.infra.Kafka); err != nil {
			return err
		}
	}
	r.base = history.Now()
	for c := 0; c < r.cfg.Clients; c++ {
		wc := workerConfig{Scenario: r.sc.Name(), Approach: r.def.Approach(), Client: c, DB: url,
			LockDB: r.lockURL, Kafka: r.infra.Kafka, Redis: r.infra.Redis, Params: r.params, Warmup: r.cfg.Warmup, Seed: r.cfg.Seed,
			Metrics: r.cfg.Metrics}
		var proxy *faultproxy.Proxy
		if network {
			var err error
			if proxy, wc.DB, err = proxied(url); err != nil {
				return err
			}
		}
		kafkaProxies, routes, err := proxyBrokers(brokers)
		if err != nil {
			if proxy != nil {
				proxy.Close()
			}
			return err
		}
		wc.KafkaRoutes = routes
		p, err := startProc(exe, r.cfg.Args, r.cfg.Env, wc, proxy, r.mon, r.cfg.Stderr)
		if err != nil {
			for _, k := range append(kafkaProxies, proxy) {
				if k != nil {
					k.Close()
				}
			}
			return err
		}
		p.kafka = kafkaProxies
		r.procs = append(r.procs, p)
	}
	// A worker that cannot get ready within startBound says why itself;
	// this bound is for one that hangs.
	bound := r.cfg.Warmup + r.params.OpTimeout + startBound(r.cfg.Clients) + 30*time.Second
	ready := r.mon.wait(ctx, bound, func() bool {
		for _, p := range r.procs {
			p.mu.Lock()
			ok := p.ready
			p.mu.Unlock()
			if !ok && !p.exited() {
				return false
			}
		}
		return true
	})
	for _, p := range r.procs {
		if p.exited() {
			<-p.done
			err := p.died()
			if strings.Contains(err.Error(), workerErrPrefix) {
				// It ran as a worker, and said why it stopped.
				return fmt.Errorf("harness: a worker did not get ready: %w", err)
			}
			return fmt.Errorf("%w: %w", errNoWorker, err)
		}
	}
	if !ready {
		return fmt.Errorf("harness: the workers were not ready within %v", bound)
	}
	return nil
}

// startBound bounds how long a fleet of clients workers takes to start and
// settle (accounts' members on their partitions, every worker's first
// connections): a minute, and a second more per worker — the last of 64
// worker processes starting on two loaded cores begins tens of seconds
// after the first, and each member that joins moves partitions again.
func startBound(clients int) time.Duration {
	return time.Minute + time.Duration(clients)*time.Second
}

// proxied starts a proxy in front of url's server and returns it with url
// pointing at it.
func proxied(url string) (*faultproxy.Proxy, string, error) {
	target, err := pgaddr.HostPort(url)
	if err != nil {
		return nil, "", fmt.Errorf("harness: network faults: %w", err)
	}
	p, err := faultproxy.Start(target)
	if err != nil {
		return nil, "", err
	}
	u, err := pgaddr.WithHostPort(url, p.Addr())
	if err != nil {
		p.Close()
		return nil, "", err
	}
	return p, u, nil
}

// proxyBrokers starts a proxy in front of each of brokers and returns them
// with the routes from each broker's address to its proxy's.
func proxyBrokers(brokers []string) ([]*faultproxy.Proxy, map[string]string, error) {
	if len(brokers) == 0 {
		return nil, nil, nil
	}
	var ps []*faultproxy.Proxy
	routes := map[string]string{}
	for _, b := range brokers {
		p, err := faultproxy.Start(b)
		if err != nil {
			for _, q := range ps {
				q.Close()
			}
			return nil, nil, err
		}
		ps = append(ps, p)
		routes[b] = p.Addr()
	}
	return ps, routes, nil
}

// cleanup kills the workers that are still running and closes the proxies.
func (r *run) cleanup() {
	for _, p := range r.procs {
		if !p.exited() {
			p.kill()
			<-p.done
		}
		for _, x := range p.proxies() {
			x.Close()
		}
	}
}

// window is the measured part of a run, on the history clock.
type window struct{ from, to history.Time }

// measure starts the measured part, injects the faults while it lasts,
// halts the workers and waits for them to exit.
func (r *run) measure(ctx context.Context) (window, error) {
	w := window{from: history.Now()}
	for _, p := range r.procs {
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
	// Whatever a fault left stopped or held goes on, so that every
	// operation ends.
	for _, p := range r.procs {
		_ = p.signal(sigCont)
		p.cut(faultproxy.Pass, true)
		p.command(command{Cmd: cmdClear})
		p.command(command{Cmd: cmdHalt})
	}
	// Half a minute, and a second more per worker: after the halt a
	// pipeline's workers drain (events: 64 consumers of one group on a
	// loaded machine rebalance for over 40 s), and a worker killed while
	// draining leaves events it never applied, which the check counts.
	bound := r.params.OpTimeout + 30*time.Second + time.Duration(r.cfg.Clients)*time.Second
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	for _, p := range r.procs {
		select {
		case <-p.done:
		case <-deadline.C:
			r.note("workers still running %v after the halt were killed; their open operations count as unknown", bound)
			r.cleanup()
		case <-ctx.Done():
			return w, ctx.Err()
		}
	}
	for _, p := range r.procs {
		if p.crashed {
			continue // the crash fault's, counted
		}
		if err := p.died(); err != nil {
			r.note("%v; its open operations count as unknown", err)
		}
	}
	return w, nil
}

// last returns once the run's duration has passed and every fault asked
// for has taken effect at least once, or once overtime() more has passed:
// a short run's few chances at a fault can all miss (the worker reached no
// before-write point in time, sent nothing into a cut), a failover can take
// longer than the run on a loaded machine, and a run in which a fault asked
// for took effect not once proves nothing about it. Ops/s are over the run
// as it lasted.
func (r *run) last(ctx context.Context) {
	if !sleep(ctx, r.cfg.Duration) {
		return
	}
	from := time.Now()
	for !r.faultsDone() {
		if time.Since(from) >= r.overtime() {
			return // Run reports the fault that never took effect
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return
		}
	}
	if d := time.Since(from); d >= 20*time.Millisecond {
		r.note("the run went on %v past its duration, until every fault asked for had taken effect", d.Round(100*time.Millisecond))
	}
}

// overtime bounds how long a run goes on past its duration for a fault
// that has not yet taken effect.
func (r *run) overtime() time.Duration { return max(r.cfg.Duration, 20*time.Second) }

// faultsDone reports whether every fault asked for has taken effect at
// least once (a restart that failed has had its one chance).
func (r *run) faultsDone() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.cfg.Faults {
		if r.injected[f] == 0 && !(f == Restart && r.injected[RestartFailed] > 0) {
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
				task.Update(ops, r.faults())
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

// faults counts the faults injected so far.
func (r *run) faults() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, v := range r.injected {
		n += v
	}
	return n
}
