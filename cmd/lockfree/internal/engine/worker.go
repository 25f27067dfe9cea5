package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/short"
)

// IsWorker reports whether this process was started by the harness as one
// of a run's workers. The lockfree binary and every test binary that runs
// the harness check it first thing, and then call WorkerMain instead of
// doing their own work:
//
//	func TestMain(m *testing.M) {
//		if engine.IsWorker() {
//			os.Exit(engine.WorkerMain())
//		}
//		os.Exit(m.Run())
//	}
func IsWorker() bool { return os.Getenv(envWorker) != "" }

// WorkerMain runs this process as a worker: it reads its configuration and
// the coordinator's commands on stdin, runs one client of one approach, and
// reports its history and events on stdout. It returns the process's exit
// code.
func WorkerMain() int {
	if err := serve(context.Background(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s%v\n", workerErrPrefix, err)
		return 1
	}
	return 0
}

// maxBlock bounds how long an operation waits at an armed point for the
// coordinator: a coordinator that died must not leave workers waiting.
const maxBlock = 2 * time.Minute

// worker is one worker process's state.
type worker struct {
	cfg workerConfig
	out *emitter

	mu      sync.Mutex
	armed   *arm
	release chan struct{} // closed by cmdClear: an operation blocked at a point goes on
	// directed is the key of the worker's next operation (cmdDirect), or
	// "", and of every one after it while stay is set.
	directed string
	stay     bool

	goCh, haltCh chan struct{}
	goOnce       sync.Once
	haltOnce     sync.Once
	// leaveCh is closed by cmdLeave, or when the coordinator is gone.
	leaveCh   chan struct{}
	leaveOnce sync.Once

	// invoked counts the operations the client invoked (Env.Invoke): a
	// call of Op that found nothing to do (a member owning no key) is
	// not an operation, and must not dilute the figures per operation.
	invoked atomic.Int64
	// tasks numbers the background tasks of Env.Task.
	tasks atomic.Int64
	// agents are the faults' parts in the worker (agent.go).
	agents []agent

	// shared holds what the worker's clients share (Env.Shared).
	sharedMu sync.Mutex
	shared   map[string]any

	// held is the time goroutines were held at inject points (Env.Held).
	held Busy
}

// serve is WorkerMain on in and out.
func serve(ctx context.Context, in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), history.MaxLine)
	if !sc.Scan() {
		return fmt.Errorf("no configuration on stdin: %v", sc.Err())
	}
	var cfg workerConfig
	if err := json.Unmarshal(sc.Bytes(), &cfg); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	w := &worker{cfg: cfg, out: &emitter{w: out}, goCh: make(chan struct{}), haltCh: make(chan struct{}), leaveCh: make(chan struct{})}
	w.agents = newAgents(w)
	go w.control(sc)
	return w.run(ctx)
}

// control follows the coordinator's commands until stdin ends, which halts
// the worker: its coordinator is gone.
func (w *worker) control(sc *bufio.Scanner) {
	defer w.leave()
	defer w.halt()
	for sc.Scan() {
		var c command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			fmt.Fprintf(os.Stderr, "lockfree worker: bad command %s: %v\n", short.Quote(sc.Text()), err)
			continue
		}
		if w.agentCommand(c) {
			continue
		}
		switch c.Cmd {
		case cmdGo:
			w.goOnce.Do(func() { close(w.goCh) })
		case cmdHalt:
			w.halt()
		case cmdLeave:
			w.leave()
		case cmdArm:
			w.mu.Lock()
			w.armed = c.Arm
			w.mu.Unlock()
		case cmdClear:
			w.clear()
		case cmdStep:
			w.step(c.Arm)
		case cmdDirect:
			w.mu.Lock()
			w.directed, w.stay = c.Key, c.Stay
			w.mu.Unlock()
		case cmdDisarm:
			w.mu.Lock()
			w.armed = nil
			w.mu.Unlock()
		}
	}
}

// agentCommand hands c to the agent it is for, and reports whether one
// took it.
func (w *worker) agentCommand(c command) bool {
	for _, a := range w.agents {
		if a.command(c) {
			return true
		}
	}
	return false
}

func (w *worker) halt() { w.haltOnce.Do(func() { close(w.haltCh) }) }

func (w *worker) leave() { w.leaveOnce.Do(func() { close(w.leaveCh) }) }

// leaveWhenLet returns once the worker may close client: at once, unless
// client is a Drainer (a member of a consumer group), whose consumer stays
// in the group until every worker has drained — until cmdLeave, or the
// coordinator is gone, at most maxBlock.
func (w *worker) leaveWhenLet(client Client) {
	if _, ok := client.(Drainer); !ok {
		return
	}
	t := time.NewTimer(maxBlock)
	defer t.Stop()
	select {
	case <-w.leaveCh:
	case <-t.C:
	}
}

func (w *worker) halted() bool {
	select {
	case <-w.haltCh:
		return true
	default:
		return false
	}
}

// clear disarms the worker and lets an operation blocked at a point go on.
func (w *worker) clear() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = nil
	w.directed, w.stay = "", false
	if w.release != nil {
		close(w.release)
		w.release = nil
	}
	for _, a := range w.agents {
		a.clear()
	}
}

// direction returns the key the worker's next operation was sent to
// (cmdDirect), once — or while it stays (command.Stay) — or "".
func (w *worker) direction() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := w.directed
	if !w.stay {
		w.directed = ""
	}
	return key
}

// step lets an operation blocked at a point go on and parks the next
// operation at its start — or, given a, arms a instead. Both happen under
// w.mu, which every operation's start takes (park): no operation can begin
// between the release and the arm.
func (w *worker) step(a *arm) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a == nil {
		a = &arm{Mode: modePark}
	}
	w.armed = a
	if w.release != nil {
		close(w.release)
		w.release = nil
	}
}

// park is called at the start of every operation (Env.Invoke), before it is
// recorded: armed with modePark (cmdStep), it reports the point and blocks
// until cmdClear.
func (w *worker) park(ctx context.Context, key string) {
	w.mu.Lock()
	a := w.armed
	if a == nil || a.Mode != modePark {
		w.mu.Unlock()
		return
	}
	w.fire(ctx, event{Ev: evPoint, Name: "harness.invoke", Key: key}, a)
}

// point is the handler of every point of the process: a fault's agent
// takes the points it holds; an arm that names a point (arm.Point) fires
// there only (for Fetched, only in a task that holds fetched events, with
// the task's key); at an operation's point, before-write or
// in-transaction (pointKind), it marks the operation as having reached its
// write and, when the worker is armed for that kind of point (arm.At),
// fires the arm once. An operation's point reached with no operation (a
// Kafka consumer's own point, on the library's context, after the engine's
// handler reached its point) fires nothing: the coordinator could not name
// the key the worker stopped on, so it could neither send a taker there
// nor see one take it over.
func (w *worker) point(ctx context.Context, name string) {
	for _, a := range w.agents {
		if a.point(ctx, name) {
			return
		}
	}
	kind := pointKind(name)
	if kind == "" {
		op := opFrom(ctx)
		w.mu.Lock()
		a := w.armed
		if a == nil || a.Point != name || a.Fetched && (op == nil || !op.fetched.Load()) {
			w.mu.Unlock()
			return
		}
		ev := event{Ev: evPoint, Name: name}
		if a.Fetched {
			ev.Key, ev.Op, ev.Token = op.key, op.ID(), op.Token()
		}
		w.fire(ctx, ev, a)
		return
	}
	op := opFrom(ctx)
	if op == nil {
		return
	}
	op.passed.Store(true)
	ev := event{Ev: evPoint, Name: name, Key: op.key, Op: op.ID(), Token: op.Token()}
	w.mu.Lock()
	a := w.armed
	if a == nil || a.Mode == modePark || a.Point != "" && a.Point != name || a.kind() != kind || (a.Key != "" && a.Key != ev.Key) || (a.Fetched && !op.fetched.Load()) ||
		slices.ContainsFunc(a.Skip, func(p string) bool { return strings.HasPrefix(ev.Key, p) }) {
		w.mu.Unlock()
		return
	}
	w.fire(ctx, ev, a)
}

// fire fires a, armed at the point of ev, once; w.mu is held, and released.
func (w *worker) fire(ctx context.Context, ev event, a *arm) {
	w.armed = nil
	release := make(chan struct{})
	w.release = release
	w.mu.Unlock()

	ev.Mode, ev.T = a.Mode, history.Now()
	if w.out.event(ev) != nil {
		return // the coordinator cannot know of the fault: do not inject it
	}
	switch a.Mode {
	case modeStop:
		// The event is written before the process stops: the coordinator
		// knows where it stopped. The operation's goroutine stops before
		// its write, which lands only after the coordinator's SIGCONT,
		// whatever the operation's deadline: the stop is not spent from
		// it (opDeadline).
		resumed := stopping(ctx)
		failpoint.StopProcess()(ctx, ev.Name)
		resumed()
	case modeStall:
		defer w.held.Start()()
		failpoint.Stall(a.For)(ctx, ev.Name)
	case modeWait, modeHold, modePark:
		defer w.held.Start()()
		// A taker held until the stale write has landed writes after it
		// whatever its deadline, as a stopped victim does.
		resumed := func() {}
		if a.Mode == modeHold {
			resumed = stopping(ctx)
		}
		t := time.NewTimer(maxBlock)
		select {
		case <-release:
		case <-t.C:
		}
		t.Stop()
		resumed()
	}
	_ = w.out.event(event{Ev: evResumed, T: history.Now(), Key: ev.Key, Op: ev.Op, Mode: a.Mode})
}

// run starts the worker's client on its pools and runs it (measure).
func (w *worker) run(ctx context.Context) error {
	def, ok := lookupApproach(w.cfg.Scenario, w.cfg.Approach)
	if !ok {
		return fmt.Errorf("no approach %s of scenario %s in this binary", short.Quote(string(w.cfg.Approach)), short.Quote(w.cfg.Scenario))
	}
	tr := &Tracer{}
	pool, err := w.pool(ctx, tr)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := firstConnection(ctx, pool, StartBound(w.cfg.Params.Clients)); err != nil {
		return err
	}
	meter := newWorkerMeter(w.cfg.Metrics)
	locks := pool
	if w.cfg.LockDB != "" {
		if locks, err = w.lockPool(ctx, tr); err != nil {
			return err
		}
		defer locks.Close()
	}
	env, err := w.env(pool, locks)
	if err != nil {
		return err
	}
	env.MeterProvider = meter.meterProvider()
	restore := failpoint.Handle(w.point)
	defer restore()
	var clients []Client
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for _, e := range w.laneEnvs(env) {
		client, err := w.newClient(ctx, def, e)
		if err != nil && w.cfg.Replaces != nil && w.halted() {
			// A crashed worker's replacement halted before its client
			// started (a member waiting for its name's lease, or for a
			// fleet that is leaving): it ran no operation.
			return w.out.event(event{Ev: evStats, T: history.Now(), Stats: &workerStats{Connects: tr.Counts().Connects}})
		}
		if err != nil {
			return fmt.Errorf("%s/%s client: %w", w.cfg.Scenario, w.cfg.Approach, err)
		}
		clients = append(clients, client)
	}
	return w.measure(ctx, clients, tr, meter)
}

// laneEnvs returns the Env of each client the worker runs: env, the first,
// and one more for each further lane (workerConfig.Lanes), which differs
// only in its client number and its random source.
func (w *worker) laneEnvs(env *Env) []*Env {
	out := []*Env{env}
	for i := 1; i < w.cfg.Lanes; i++ {
		e := *env
		e.Client = w.cfg.Client + i
		e.Rand = laneRand(w.cfg.Seed, e.Client)
		out = append(out, &e)
	}
	return out
}

// laneRand is the random source of client in a run seeded with seed.
func laneRand(seed uint64, client int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(client)))
}

// lanes runs op on each client in a goroutine of its own until done, and
// returns the first error: the other clients stop at their next
// operation.
func lanes(clients []Client, done func() bool, op func(Client) error) error {
	var g errgroup.Group
	var failed atomic.Bool
	for _, c := range clients {
		g.Go(func() error {
			for !done() && !failed.Load() {
				if err := op(c); err != nil {
					failed.Store(true)
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// measure runs the worker's clients, all at once: the warm-up, then
// operations from cmdGo until cmdHalt, then their drain and the stats; a
// Drainer then waits until every worker drained (leaveWhenLet).
func (w *worker) measure(ctx context.Context, clients []Client, tr *Tracer, meter *workerMeter) error {
	warm := time.Now().Add(w.cfg.Warmup)
	op := func(c Client) error { return w.op(ctx, c) }
	if err := lanes(clients, func() bool { return !time.Now().Before(warm) || w.halted() }, op); err != nil {
		return err
	}
	if err := w.out.event(event{Ev: evReady, T: history.Now()}); err != nil {
		return err
	}
	select {
	case <-w.goCh:
	case <-w.haltCh:
		return w.out.event(event{Ev: evStats, T: history.Now(), Stats: &workerStats{Connects: tr.Counts().Connects}})
	}
	start, extra := tr.Counts(), extraCounts()
	if err := w.out.event(event{Ev: evGo, T: history.Now()}); err != nil {
		return err
	}
	from := w.invoked.Load()
	if err := lanes(clients, w.halted, op); err != nil {
		return err
	}
	ops := w.invoked.Load() - from
	end := tr.Counts()
	for _, client := range clients {
		if d, ok := client.(Drainer); ok {
			if err := d.Drain(ctx); err != nil {
				return fmt.Errorf("%s/%s: draining: %w", w.cfg.Scenario, w.cfg.Approach, err)
			}
		}
	}
	metrics, err := meter.collect(ctx)
	if err != nil {
		return err
	}
	st := &workerStats{Metrics: metrics, Ops: ops, RoundTrips: end.RoundTrips - start.RoundTrips, Statements: end.Statements - start.Statements,
		OpRoundTrips: end.OpRoundTrips - start.OpRoundTrips, OpStatements: end.OpStatements - start.OpStatements,
		OpRiders: end.OpRiders - start.OpRiders,
		Connects: end.Connects, Hits: hits(), Extra: extraSince(extra)}
	for _, client := range clients {
		if c, ok := client.(Counter); ok {
			if st.Counts == nil {
				st.Counts = map[string]int64{}
			}
			for k, n := range c.Counts() {
				st.Counts[k] += n
			}
		}
	}
	if err := w.out.event(event{Ev: evStats, T: history.Now(), Stats: st}); err != nil {
		return err
	}
	w.leaveWhenLet(clients[0])
	return nil
}

// newClient starts def's client on env. A crashed worker's replacement's
// start ends at the halt: it may be waiting for its name's lease to lapse,
// or for a fleet to settle that is leaving as the run ends. Once started,
// the client keeps ctx.
func (w *worker) newClient(ctx context.Context, def ApproachDef, env *Env) (Client, error) {
	if w.cfg.Replaces == nil {
		return def.NewClient(ctx, env)
	}
	sctx, cancel := context.WithCancel(ctx)
	started := make(chan struct{})
	go func() {
		select {
		case <-w.haltCh:
			cancel()
		case <-started:
		}
	}()
	c, err := def.NewClient(sctx, env)
	close(started)
	if err != nil {
		cancel()
		return nil, err
	}
	return c, nil // sctx lives on with the client; a halt as it started may end it, and the worker halts
}

// op runs one operation under the operation timeout, which the time the
// process spends stopped at a before-write point does not spend
// (opDeadline).
func (w *worker) op(ctx context.Context, c Client) error {
	ctx, cancel := withOpDeadline(ctx, w.cfg.Params.OpTimeout)
	defer cancel()
	if err := c.Op(ctx); err != nil {
		return fmt.Errorf("%s/%s: %w", w.cfg.Scenario, w.cfg.Approach, err)
	}
	return nil
}

// pool connects to the run's schema, with tr counting what it sends. It is
// small (poolSize): one client runs one operation at a time, beside its lock service's
// listener and keepalives, and a background consumer whose transaction may
// wait for a lock (singlewriter.Fenced acquires inside it): a pool too small
// for both would leave that transaction open, its row locks stalling every
// other worker.
func (w *worker) pool(ctx context.Context, tr *Tracer) (*pgxpool.Pool, error) {
	return dial(ctx, "database", w.cfg.DB, sessionName(w.cfg.Run, w.cfg.Client), w.poolSize(), tr)
}

// firstConnection waits until pool has connected once, trying again within
// bound: 64 workers starting at once on a loaded machine make the server
// fork a backend for each, and a first connection may miss the pool's
// connect timeout, which bounds the connections made later, mid-run.
func firstConnection(ctx context.Context, pool *pgxpool.Pool, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		err := pool.Ping(ctx)
		if err == nil {
			return nil
		}
		if !Sleep(ctx, 100*time.Millisecond) {
			return fmt.Errorf("database: no connection within %v: %w", bound, err)
		}
	}
}

// lockPool connects a worker to its lock service on a database of its own
// (workerConfig.LockDB): its connections go to whichever node accepts
// writes.
func (w *worker) lockPool(ctx context.Context, tr *Tracer) (*pgxpool.Pool, error) {
	return dial(ctx, "lock database", w.cfg.LockDB, sessionName(w.cfg.Run, w.cfg.Client), w.poolSize(), tr)
}

// poolSize is the most connections of each of the worker's pools: 8 for
// one client (pool), two more for each further one.
func (w *worker) poolSize() int32 { return 6 + 2*int32(max(1, w.cfg.Lanes)) }

// dial is a worker's pool on url (what, in errors) of at most size
// connections, its sessions named app.
func dial(ctx context.Context, what, url, app string, size int32, tr *Tracer) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	pc.MaxConns = size
	pc.ConnConfig.Tracer = tr
	pc.ConnConfig.ConnectTimeout = 2 * time.Second
	pc.ConnConfig.RuntimeParams["application_name"] = app
	return pgxpool.NewWithConfig(ctx, pc)
}

// env is the client's environment on pool, its lock service on locksDB.
func (w *worker) env(pool, locksDB *pgxpool.Pool) (*Env, error) {
	locks, err := fencedlock.NewPostgres(locksDB, &fencedlock.PostgresConfig{Notify: true})
	if err != nil {
		return nil, err
	}
	env := &Env{
		Client: w.cfg.Client, Params: w.cfg.Params, DB: pool,
		Locks: recordingLocks{Store: locks, w: w, grants: newGrants()},
		Kafka: w.cfg.Kafka,
		Redis: w.cfg.Redis,
		Etcd:  w.cfg.Etcd,
		Rand:  laneRand(w.cfg.Seed, w.cfg.Client),
		rec:   history.NewRecorder(historyWriter{w.out}),
		w:     w,
	}
	if w.cfg.Replaces != nil {
		// It runs as the crashed worker, its history its own.
		lane := w.cfg.Client
		env.Client, env.replacement = *w.cfg.Replaces, &lane
	}
	if len(w.cfg.KafkaRoutes) > 0 {
		env.KafkaDial = faultproxy.Redirect(w.cfg.KafkaRoutes)
	}
	return env, nil
}

// hits returns the failpoint sites this process reached, for a mutant run to
// prove that it exercised its mutant.
func hits() map[string]int64 {
	out := map[string]int64{}
	for _, p := range failpoint.Registered() {
		if n := failpoint.Hits(p.Name); n > 0 {
			out[p.Name] = n
		}
	}
	return out
}

// workerErrPrefix starts the line a worker writes on stderr when it stops
// on an error: the coordinator tells from it a worker that failed from a
// process that never ran as one.
const workerErrPrefix = "lockfree worker: "

// errNoWorker is returned when a started process never behaves as a worker:
// its binary does not call WorkerMain when IsWorker.
var errNoWorker = errors.New("engine: the process did not run as a worker (does its main or TestMain call engine.WorkerMain when engine.IsWorker?)")
