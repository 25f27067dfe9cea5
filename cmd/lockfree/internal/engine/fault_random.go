package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// Random plays a schedule drawn from the run's seed (Schedule): bursts of
// overlapping injections of the faults the approach admits, each at its
// time, against its worker, a stall for its length. Each injection goes
// through its own fault's injector and is counted under its fault, and
// under random once it took effect. Injections of one fault, or into one
// worker, take turns: the later one waits.
const Random Fault = "random"

type random struct{}

func (random) Name() Fault { return Random }
func (random) How() string {
	return "injections of a schedule drawn from the seed (--seed): the faults the approach admits but the whole-run ones, in overlapping bursts, each at its time, against its worker, a stall for its length (and one broker-kill with --kafka-ctl)"
}
func (random) counts() string {
	return "an injection took effect, counted under its own fault too"
}
func (random) wholeRun()  {}
func (random) networked() {}

func (random) skip(_ Scenario, def ApproachDef) string {
	if _, shared := def.(Handlers); len(schedulePool(def, shared)) == 0 {
		return "no fault that hits one worker at a time takes effect in it"
	}
	return ""
}

// check refuses a run whose schedules may kill a broker it cannot kill.
func (random) check(cfg Config, infra Infra) error {
	if cfg.KillBrokers {
		return brokerKill{}.check(cfg, infra)
	}
	return nil
}

func (random) start(r *run) injector {
	s := &randomRun{r: r, plan: kept(drawSchedule(r.cfg, r.def, r.prot.Lease), r.cfg.Keep), runs: map[Fault]injector{},
		kinds: map[Fault]*sync.Mutex{}, workers: map[int]*sync.Mutex{}}
	for _, in := range s.plan {
		if _, ok := s.runs[in.Fault]; !ok {
			k, _ := faultByName(in.Fault)
			s.runs[in.Fault], s.kinds[in.Fault] = k.start(r), &sync.Mutex{}
		}
	}
	return s
}

// randomRun plays one run's schedule through its faults' injectors, one
// each: an injector's state is its run's.
type randomRun struct {
	r     *run
	runs  map[Fault]injector
	kinds map[Fault]*sync.Mutex // one injection of a fault at a time
	over  atomic.Bool           // every injection was played, or the run ended

	mu      sync.Mutex
	plan    []report.Injection  // with the outcomes so far
	workers map[int]*sync.Mutex // by client: one injection into a worker at a time
}

// inject plays every injection of the schedule, each in its own goroutine
// from its time on, and returns once all have been played or ctx ended.
func (s *randomRun) inject(ctx context.Context, _ *proc) {
	defer s.over.Store(true)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range s.plan {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.play(ctx, i, t0)
		}()
	}
	wg.Wait()
}

// play injects the schedule's injection i, due at its time past t0, once
// its fault and its worker are free, and records its outcome.
func (s *randomRun) play(ctx context.Context, i int, t0 time.Time) {
	s.mu.Lock()
	in := s.plan[i]
	s.mu.Unlock()
	if !Sleep(ctx, duration(in.AtS)-time.Since(t0)) {
		return
	}
	kind := s.kinds[in.Fault]
	kind.Lock()
	defer kind.Unlock()
	if k, ok := s.runs[in.Fault].(killer); ok {
		s.played(i, in.Fault, &report.Outcome{Worker: in.Worker, StartS: seconds(time.Since(t0))}, func() { k.kill(ctx) })
		return
	}
	v, unlock := s.victim(ctx, in.Worker)
	if v == nil {
		return
	}
	defer unlock()
	inj := s.runs[in.Fault]
	ctx = withAt(ctx, in.At)
	s.played(i, in.Fault, &report.Outcome{Worker: v.client, StartS: seconds(time.Since(t0))}, func() {
		if l, ok := inj.(lastingInjector); ok && in.ForS > 0 {
			l.injectFor(ctx, v, duration(in.ForS))
		} else {
			inj.inject(ctx, v)
		}
	})
}

// played runs injection i of fault f with play and records its outcome o:
// it took effect if play counted f.
func (s *randomRun) played(i int, f Fault, o *report.Outcome, play func()) {
	before := s.r.log.injectedOf(f)
	play()
	if o.Effect = s.r.log.injectedOf(f) > before; o.Effect {
		s.r.log.count(Random)
	}
	s.mu.Lock()
	s.plan[i].Outcome = o
	s.mu.Unlock()
}

// victim returns the worker an injection meant for worker w goes to — w,
// or when it completed no operation in the last second the next active
// one (fleet.victim) — once no other injection is going on in it, with
// what lets the next one in; nil when ctx ended first.
func (s *randomRun) victim(ctx context.Context, w int) (*proc, func()) {
	for ctx.Err() == nil {
		i := w / s.r.cfg.lanes() // the index of w's process
		v, _ := s.r.fleet.victim(&i, s.r.mon)
		if v == nil {
			Sleep(ctx, 10*time.Millisecond)
			continue
		}
		s.mu.Lock()
		m, ok := s.workers[v.client]
		if !ok {
			m = &sync.Mutex{}
			s.workers[v.client] = m
		}
		s.mu.Unlock()
		m.Lock()
		if !v.exited() && ctx.Err() == nil {
			return v, m.Unlock
		}
		m.Unlock()
	}
	return nil, nil
}

// settled: the run may end once the schedule was played, whatever took
// effect (Run reports a schedule none of which did).
func (s *randomRun) settled() bool { return s.over.Load() }

// schedule returns the schedule with its outcomes.
func (s *randomRun) schedule() []report.Injection {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]report.Injection(nil), s.plan...)
}
