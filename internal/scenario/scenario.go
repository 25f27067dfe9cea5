// Package scenario runs a workload — N clients over K keys for a duration —
// against each approach to one problem (the lock-free alternative, the fenced
// lock, a naive lock, a bare SQL baseline), injects faults while it runs, and
// checks the scenario's invariants afterwards. Tests and `lockfree compare`
// share it, so the figures in docs/ and the assertions in CI come from one
// implementation.
package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/migrate"
)

// Approach names one way of solving a scenario's problem. The names are part
// of the public JSON report.
type Approach = report.Approach

const (
	// Alternative is the lock-free mechanism of the scenario's package.
	Alternative Approach = "alternative"
	// FencedLock is the lease lock with fencing tokens checked by the resource.
	FencedLock Approach = "fenced-lock"
	// NaiveLock is the same lease lock with an unguarded write: it must
	// show violations under pauses, which proves the checker can see them.
	NaiveLock Approach = "naive-lock"
	// Raw is bare SQL with no protection beyond the statement itself: the
	// physical limit for overhead ratios.
	Raw Approach = "raw"
)

// Fault is a fault injected while a scenario runs.
type Fault = report.Fault

const (
	// Pause makes some operations sleep past the lease between their read
	// (or acquire) and their write.
	Pause Fault = "pause"
	// Partition puts a TCP proxy between the clients and PostgreSQL and
	// cycles it through delays, blackholes and resets.
	Partition Fault = "partition"
	// Restart stops and starts the PostgreSQL server mid-run.
	Restart Fault = "restart"
)

// ParseFaults parses "none" or a comma-separated list of faults.
func ParseFaults(s string) ([]Fault, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []Fault
	for _, f := range strings.Split(s, ",") {
		switch Fault(strings.TrimSpace(f)) {
		case Pause, Partition, Restart:
			out = append(out, Fault(strings.TrimSpace(f)))
		default:
			return nil, fmt.Errorf("unknown fault %q (want none, pause, partition, restart)", f)
		}
	}
	return out, nil
}

// Outcome is what one operation reports.
type Outcome struct {
	// Err is a failure; the operation did not take effect — unless
	// Uncertain is set.
	Err error
	// Rejected: the operation was refused by the mechanism (insufficient
	// stock, a conflict that retries did not resolve, a fenced write, a
	// lock held elsewhere). Not an error and not a success.
	Rejected bool
	// Uncertain: the operation's fate is unknown (the connection broke
	// after the statement was sent); the checker allows it either way.
	Uncertain bool
	// Retries is how many extra attempts the operation made.
	Retries int
}

// Workload is one approach's implementation of a scenario.
type Workload interface {
	// Op performs one operation as client; it is called concurrently by
	// every client.
	Op(ctx context.Context, client int, rnd *rand.Rand) Outcome
	// Check verifies the scenario's invariants once the clients are done
	// and returns the number of violations and a human description.
	Check(ctx context.Context) (violations int64, detail string, err error)
}

// Drainer is an optional Workload ability, for scenarios whose operations
// hand work to a pipeline that finishes it later (events produced to Kafka
// and applied by consumers). After the clients stop and before Check, Run
// calls Drain, which waits until the pipeline has finished the work (or ctx
// ends: Check then reports what is missing) and returns how many units it
// finished and over how long. Run reports those as Ops and OpsPerSec, and the
// clients' own count (warm-up included, as the pipeline finishes that work
// too) as Submitted.
type Drainer interface {
	Drain(ctx context.Context) (completed int64, busy time.Duration, err error)
}

// Scenario is one problem solved by several approaches.
type Scenario struct {
	Name        string
	Description string
	// Approaches lists what the scenario implements, in report order.
	Approaches []Approach
	// Labels describe each approach in one short phrase.
	Labels map[Approach]string
	// Migrations are applied to each approach's fresh schema.
	Migrations []migrate.Migration
	// New prepares a workload for approach in env.
	New func(ctx context.Context, env *Env, approach Approach) (Workload, error)
}

var registry = map[string]Scenario{}

func register(s Scenario) { registry[s.Name] = s }

// Lookup returns a registered scenario.
func Lookup(name string) (Scenario, bool) {
	s, ok := registry[name]
	return s, ok
}

// Names lists the registered scenarios in a stable order.
func Names() []string {
	order := map[string]int{"inventory": 1, "documents": 2, "payments": 3, "accounts": 4, "events": 5}
	var out []string
	for n := range registry {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		oi, oj := order[out[i]], order[out[j]]
		if oi == 0 {
			oi = 99
		}
		if oj == 0 {
			oj = 99
		}
		if oi != oj {
			return oi < oj
		}
		return out[i] < out[j]
	})
	return out
}

// Env is what a workload runs on.
type Env struct {
	// DB is the pool the clients use: through the fault proxy under the
	// partition fault. Nil on the memory backend.
	DB *pgxpool.Pool
	// Admin is a direct pool for setup and invariant checks. Nil on memory.
	Admin *pgxpool.Pool
	// Locks is the lease lock the twins use, on DB (or in memory).
	Locks fencedlock.Store
	// Keys and Clients are the run's sizes.
	Keys, Clients int
	// LeaseTTL is the lease the lock-based approaches take.
	LeaseTTL time.Duration
	// Kafka lists brokers when configured.
	Kafka []string

	pausing atomic.Bool
	paused  atomic.Bool
	pauses  atomic.Int64
}

// Memory reports whether the workload must use the memory backends.
func (e *Env) Memory() bool { return e.DB == nil }

// Pause is the hook between an operation's read (or acquire) and its write.
// Under the pause fault, the first operation to reach it and about one in
// twenty after that sleep for twice the lease, long enough for the lease to
// expire and another client to take over.
func (e *Env) Pause(ctx context.Context, rnd *rand.Rand) {
	if !e.pausing.Load() {
		return
	}
	if !e.paused.CompareAndSwap(false, true) && rnd.IntN(20) != 0 {
		return
	}
	e.pauses.Add(1)
	t := time.NewTimer(2 * e.LeaseTTL)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Config describes a run.
type Config struct {
	Clients  int
	Keys     int
	Duration time.Duration
	Faults   []Fault
	// LeaseTTL for the lock-based approaches. Defaults to 250ms.
	LeaseTTL time.Duration
	// OpTimeout bounds one operation. Defaults to 2s.
	OpTimeout time.Duration
	// Progress receives one line per second while a run goes on, and the
	// harness's messages. Optional.
	Progress io.Writer
	// Live, when set, follows each approach's run instead of the lines
	// on Progress (see report.NewProgress).
	Live report.Progress
	// Approaches, when set, restricts a run to these of the scenario's
	// approaches (in the scenario's order): --rounds interleaves them.
	Approaches []Approach
}

// Infra is where scenarios run.
type Infra struct {
	// URL of the PostgreSQL database; empty means the memory backends.
	URL string
	// Restart stops and starts the server (the restart fault); nil when
	// the server cannot be restarted from here.
	Restart func(ctx context.Context) error
	// Kafka brokers, when configured.
	Kafka []string
}

// Result is one approach's line of the report, and Report one scenario's
// run; they live in internal/report, which renders them.
type (
	Result = report.Result
	Report = report.Report
)

func (c *Config) setDefaults() {
	if c.Clients <= 0 {
		c.Clients = 16
	}
	if c.Keys <= 0 {
		c.Keys = 1
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Second
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 250 * time.Millisecond
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = 2 * time.Second
	}
}

func has(fs []Fault, f Fault) bool {
	for _, x := range fs {
		if x == f {
			return true
		}
	}
	return false
}

// Run runs every approach of sc, one after the other, under cfg's faults.
func Run(ctx context.Context, sc Scenario, cfg Config, infra Infra) (Report, error) {
	cfg.setDefaults()
	backend := "postgres"
	if infra.URL == "" {
		backend = "memory"
	}
	rep := Report{Scenario: sc.Name, Backend: backend, Clients: cfg.Clients, Keys: cfg.Keys,
		DurationS: cfg.Duration.Seconds(), Faults: cfg.Faults}
	if rep.Faults == nil {
		rep.Faults = []Fault{}
	}
	if backend == "memory" && (has(cfg.Faults, Partition) || has(cfg.Faults, Restart)) {
		rep.Notes = append(rep.Notes, "partition and restart faults need PostgreSQL; the memory backend ran without them")
	}
	if backend == "postgres" && has(cfg.Faults, Restart) && infra.Restart == nil {
		rep.Notes = append(rep.Notes, "restart fault skipped: this server cannot be restarted from here (use the embedded server or --restart-cmd)")
	}
	for _, a := range sc.Approaches {
		if cfg.Approaches != nil && !slices.Contains(cfg.Approaches, a) {
			continue
		}
		res, err := runApproach(ctx, sc, a, cfg, infra)
		if errors.Is(err, errSkip) {
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("%s/%s: %w", sc.Name, a, err)
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

func runApproach(ctx context.Context, sc Scenario, a Approach, cfg Config, infra Infra) (Result, error) {
	env := &Env{Keys: cfg.Keys, Clients: cfg.Clients, LeaseTTL: cfg.LeaseTTL, Kafka: infra.Kafka}
	var proxy *faultproxy.Proxy
	if infra.URL == "" {
		env.Locks, _ = fencedlock.NewMemory(nil) // the defaults are valid
	} else {
		sch, err := newSchema(ctx, infra.URL, sc, a)
		if err != nil {
			return Result{}, err
		}
		defer sch.drop()
		env.Admin = sch.admin
		clientURL := sch.url
		if has(cfg.Faults, Partition) {
			target, err := pgaddr.HostPort(infra.URL)
			if err != nil {
				return Result{}, fmt.Errorf("partition fault: %w", err)
			}
			if proxy, err = faultproxy.Start(target); err != nil {
				return Result{}, err
			}
			defer proxy.Close()
			if clientURL, err = pgaddr.WithHostPort(sch.url, proxy.Addr()); err != nil {
				return Result{}, err
			}
		}
		pcfg, err := pgxpool.ParseConfig(clientURL)
		if err != nil {
			return Result{}, err
		}
		pcfg.MaxConns = int32(cfg.Clients + 4)
		pcfg.ConnConfig.ConnectTimeout = 2 * time.Second
		if env.DB, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
			return Result{}, err
		}
		defer env.DB.Close()
		if env.Locks, err = fencedlock.NewPostgres(env.DB, nil); err != nil {
			return Result{}, err
		}
	}
	w, err := sc.New(ctx, env, a)
	if err != nil {
		return Result{}, err
	}
	if c, ok := w.(io.Closer); ok {
		defer c.Close()
	}

	// Warm up, unmeasured and without faults: the pool dials its
	// connections, statements get prepared, consumers join their groups.
	// Whichever approach ran first would otherwise pay for it alone.
	var warmed Result
	if warm := min(time.Second, cfg.Duration/5); warm > 0 {
		warmCtx, cancel := context.WithTimeout(ctx, warm)
		warmed, _ = drive(warmCtx, cfg, w, nil)
		cancel()
	}

	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var faults sync.WaitGroup
	faults.Add(1)
	go func() {
		defer faults.Done()
		inject(runCtx, cfg, env, proxy, infra)
	}()
	var ops atomic.Int64
	var task report.Task
	var progress <-chan struct{}
	if cfg.Live != nil {
		task, progress = startLive(runCtx, cfg, sc.Name, a, &ops, &env.pauses)
	} else {
		progress = startProgress(runCtx, cfg.Progress, sc.Name, a, &ops)
	}
	start := time.Now()
	res, latencies := drive(runCtx, cfg, w, &ops)
	elapsed := time.Since(start)
	res.Approach, res.Label = a, sc.Labels[a]
	stop()
	faults.Wait()
	<-progress
	if proxy != nil {
		proxy.Set(faultproxy.Pass, 0)
	}
	res.Pauses = env.pauses.Load()
	res.OpsPerSec = float64(res.Ops) / elapsed.Seconds()
	res.P50ms, res.P99ms = percentile(latencies, 0.50), percentile(latencies, 0.99)

	checkCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if d, ok := w.(Drainer); ok {
		n, busy, err := d.Drain(checkCtx)
		if err != nil {
			return res, fmt.Errorf("draining: %w", err)
		}
		// The pipeline finished the warm-up's work too.
		res.Submitted, res.Ops = res.Ops+warmed.Ops, n
		res.OpsPerSec = 0
		if busy > 0 {
			res.OpsPerSec = float64(n) / busy.Seconds()
		}
	}
	var cerr error
	for attempt := 0; attempt < 30; attempt++ {
		// After a restart or partition the first queries may still fail.
		res.Violations, res.Detail, cerr = w.Check(checkCtx)
		if cerr == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if cerr != nil {
		return res, fmt.Errorf("checking invariants: %w", cerr)
	}
	res.Checked = true
	if task != nil {
		task.Done(res)
	}
	return res, nil
}

// drive runs the clients until runCtx ends and returns their counts and the
// latencies of their successful operations; ops, when not nil, follows the
// successes as they happen.
func drive(runCtx context.Context, cfg Config, w Workload, ops *atomic.Int64) (Result, []time.Duration) {
	var (
		res       Result
		mu        sync.Mutex
		latencies []time.Duration
		wg        sync.WaitGroup
	)
	for c := 0; c < cfg.Clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			var local []time.Duration
			var r Result
			for runCtx.Err() == nil {
				opCtx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), cfg.OpTimeout+3*cfg.LeaseTTL)
				t0 := time.Now()
				out := w.Op(opCtx, c, rnd)
				d := time.Since(t0)
				cancel()
				r.Retries += int64(out.Retries)
				switch {
				case out.Uncertain:
					r.Uncertain++
				case out.Err != nil:
					r.Errors++
					if errors.Is(out.Err, context.Canceled) && runCtx.Err() != nil {
						r.Errors--
					}
				case out.Rejected:
					r.Rejected++
				default:
					r.Ops++
					if ops != nil {
						ops.Add(1)
					}
					local = append(local, d)
				}
			}
			mu.Lock()
			latencies = append(latencies, local...)
			res.Ops += r.Ops
			res.Retries += r.Retries
			res.Rejected += r.Rejected
			res.Errors += r.Errors
			res.Uncertain += r.Uncertain
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res, latencies
}

func percentile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := int(float64(len(ds)-1) * p)
	return float64(ds[i].Nanoseconds()) / 1e6
}

func startProgress(ctx context.Context, w io.Writer, name string, a Approach, ops *atomic.Int64) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if w == nil {
			return
		}
		start := time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				fmt.Fprintf(w, "%s/%s: %d ops in %.1fs\n", name, a, ops.Load(), time.Since(start).Seconds())
				return
			case <-tick.C:
				fmt.Fprintf(w, "%s/%s: %d ops after %.0fs\n", name, a, ops.Load(), time.Since(start).Seconds())
			}
		}
	}()
	return done
}

// startLive follows a run on cfg.Live, when set, instead of startProgress:
// it updates the task every second until ctx ends.
func startLive(ctx context.Context, cfg Config, name string, a Approach, ops, faults *atomic.Int64) (report.Task, <-chan struct{}) {
	task := cfg.Live.Start(name, a, cfg.Duration)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				task.Update(ops.Load(), faults.Load())
				return
			case <-tick.C:
				task.Update(ops.Load(), faults.Load())
			}
		}
	}()
	return task, done
}

// inject drives the faults for one approach's run.
func inject(ctx context.Context, cfg Config, env *Env, proxy *faultproxy.Proxy, infra Infra) {
	if has(cfg.Faults, Pause) {
		env.pausing.Store(true)
		defer env.pausing.Store(false)
	}
	var wg sync.WaitGroup
	if proxy != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			partitions(ctx, cfg.Duration, proxy)
		}()
	}
	if has(cfg.Faults, Restart) && infra.Restart != nil && infra.URL != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !sleepCtx(ctx, cfg.Duration/3) {
				return
			}
			rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := infra.Restart(rctx); err != nil && cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "restart fault failed: %v\n", err)
			}
		}()
	}
	wg.Wait()
	<-ctx.Done()
}

// partitions cycles the proxy: delay, pass, blackhole, pass, reset, pass.
func partitions(ctx context.Context, total time.Duration, p *faultproxy.Proxy) {
	step := total / 8
	if step < 200*time.Millisecond {
		step = 200 * time.Millisecond
	}
	cycle := []struct {
		mode  faultproxy.Mode
		delay time.Duration
	}{
		{faultproxy.Pass, 0}, {faultproxy.Delay, 50 * time.Millisecond}, {faultproxy.Pass, 0},
		{faultproxy.Blackhole, 0}, {faultproxy.Pass, 0}, {faultproxy.Reset, 0}, {faultproxy.Pass, 0},
	}
	for i := 0; ; i++ {
		c := cycle[i%len(cycle)]
		p.Set(c.mode, c.delay)
		if !sleepCtx(ctx, step) {
			p.Set(faultproxy.Pass, 0)
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
