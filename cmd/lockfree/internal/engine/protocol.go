package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// The coordinator and its workers talk in lines. The coordinator writes a
// workerConfig as the first line of the worker's stdin, then commands, one
// JSON object a line. The worker writes two kinds of line on its stdout:
// "H " followed by a line of its history recorder, and "E " followed by an
// event, both JSON; each is one write, so a worker killed at any point
// leaves whole lines behind, and perhaps one torn last line, which the
// coordinator drops.

// envWorker, set in a process's environment, makes it a worker: the lockfree
// binary and test binaries check it first thing (IsWorker).
const envWorker = "LOCKFREE_HARNESS_WORKER"

const (
	prefixHistory = "H "
	prefixEvent   = "E "
)

// workerConfig is what a worker needs to run its client.
type workerConfig struct {
	Scenario string   `json:"scenario"`
	Approach Approach `json:"approach"`
	// Client is the worker's client number in the history: its first,
	// when it runs Lanes clients, numbered from Client on.
	Client int `json:"client"`
	// Lanes is how many clients the worker runs (Config.Procs); 0 is one.
	Lanes int `json:"lanes,omitempty"`
	// Replaces, when set, is the client number of the crashed worker this
	// one was started in place of (the crash fault): its client runs as
	// that one (Env.Client: the same member and holder names), its history
	// under Client, a number of its own.
	Replaces *int `json:"replaces,omitempty"`
	// DB connects to the run's schema, through the worker's own proxy
	// when the run injects network faults.
	DB string `json:"db"`
	// Run tags the run's database sessions: each is named
	// sessionName(Run, Client), so that the coordinator can tell whose
	// transaction blocks whose.
	Run string `json:"run,omitempty"`
	// LockDB, when set, is where the lock service lives instead of DB:
	// the replicated pair of the failover fault, all of its nodes listed,
	// target_session_attrs=read-write.
	LockDB string `json:"lock_db,omitempty"`
	// Kafka lists the brokers; KafkaRoutes maps each broker address to the
	// worker's proxy of it, when the run injects network faults.
	Kafka       []string          `json:"kafka,omitempty"`
	KafkaRoutes map[string]string `json:"kafka_routes,omitempty"`
	// Redis is the address of the run's Redis server, for the
	// redis-lock approaches.
	Redis string `json:"redis,omitempty"`
	// Etcd lists the endpoints of the run's etcd server, for the
	// etcd-lock approaches.
	Etcd   string `json:"etcd,omitempty"`
	Params Params `json:"params"`
	// Warmup is how long the worker runs operations before it reports
	// ready; they are recorded, and not measured.
	Warmup time.Duration `json:"warmup"`
	Seed   uint64        `json:"seed"`
	// Metrics: the worker gives its client a MeterProvider (Env) and
	// reports what it recorded with its stats.
	Metrics bool `json:"metrics,omitempty"`
}

// command is a line the coordinator sends a worker after its config.
type command struct {
	Cmd string `json:"cmd"`
	Arm *arm   `json:"arm,omitempty"`
	// Key is the key of cmdDirect.
	Key string `json:"key,omitempty"`
	// Stay keeps cmdDirect's direction for every operation after the
	// next, until a cmdDirect without it or cmdClear: a taker whose
	// directed operation failed before its write (a connection the
	// failover killed) sends its next one to the key again.
	Stay bool `json:"stay,omitempty"`
}

// The commands.
const (
	// cmdGo starts the measured part of the run.
	cmdGo = "go"
	// cmdHalt ends it: the worker finishes its operation, reports its
	// stats and exits — a Drainer once it has drained and been sent
	// cmdLeave.
	cmdHalt = "halt"
	// cmdLeave lets a worker that drained (a Drainer: a member of a
	// consumer group) close its client, once every worker of the run has
	// drained or exited: a member that left the group earlier would make
	// it rebalance, and stop every other member, while they still apply
	// what their producers sent.
	cmdLeave = "leave"
	// cmdArm arms the worker's before-write points (command.Arm).
	cmdArm = "arm"
	// cmdClear disarms them and lets an operation blocked at one go on.
	cmdClear = "clear"
	// cmdDisarm disarms them, leaving an operation blocked at one blocked.
	cmdDisarm = "disarm"
	// cmdStep lets an operation blocked at a point go on and parks the
	// worker's next operation at its start (modePark) until cmdClear:
	// the client writes once, and nothing more. With command.Arm, it arms
	// that instead of the park: an operation parked at its start goes on,
	// armed for its point.
	cmdStep = "step"
	// cmdDirect sends the worker's next operation to command.Key, in the
	// scenarios whose clients pick their keys (Env.Directed): a fault's
	// taker, sent to the key of a worker it stopped or cut off. cmdClear
	// drops a direction not yet taken.
	cmdDirect = "direct"
)

// arm says what a worker does at the next before-write point it reaches
// (of an operation on Key, when Key is set), once.
type arm struct {
	Mode string        `json:"mode"`
	Key  string        `json:"key,omitempty"`
	For  time.Duration `json:"for,omitempty"`
	// Point, when set, is the one point the arm fires at instead of any
	// before-write point: a point of a library's background work
	// (memberPoint), or one operation point (Aimer).
	Point string `json:"point,omitempty"`
	// Fetched: only at a point of a task that holds events it fetched from
	// a stream and has written nothing of them yet (markFetched).
	Fetched bool `json:"fetched,omitempty"`
	// Token is the lease of a late-renewal arm (modeRenew).
	Token int64 `json:"token,omitempty"`
	// Skip lists the prefixes of the keys the arm does not fire at
	// (StaleBlind).
	Skip []string `json:"skip,omitempty"`
	// At is the kind of operation point the arm fires at: AtInTx, or ""
	// for a before-write point.
	At string `json:"at,omitempty"`
}

// The modes of an arm.
const (
	// modeStop stops the whole process with SIGSTOP, until the
	// coordinator sends SIGCONT: a paused process.
	modeStop = "stop"
	// modeStall blocks the operation's goroutine for arm.For, the rest of
	// the process running on.
	modeStall = "stall"
	// modeWait blocks the operation until cmdClear: the coordinator cuts
	// the worker off meanwhile, so that the write goes into the cut.
	modeWait = "wait"
	// modeHold is modeWait for the client that took over from a stopped
	// one: it holds its write back until the stale one has landed.
	modeHold = "hold"
	// modePark blocks the worker's next operation before it is invoked
	// (Env.Invoke), until cmdClear. Only cmdStep arms it, in the step that
	// releases the operation blocked at a point: a client that took a key
	// over writes once and then cannot begin another operation — take a
	// lease, raise a fence — until the coordinator lets it. A before-write
	// point does not fire it.
	modePark = "park"
)

// event is a line a worker reports besides its history.
type event struct {
	Ev string       `json:"ev"`
	T  history.Time `json:"t"`
	// Key is the key of the operation the event belongs to.
	Key string `json:"key,omitempty"`
	// Name is a lock's name, or a before-write point's.
	Name string `json:"name,omitempty"`
	// Token is a lease's fencing token; at a point, the token of the
	// lease the operation holds (0 for none).
	Token int64         `json:"token,omitempty"`
	TTL   time.Duration `json:"ttl,omitempty"`
	// Sent is when the request that made a lease event was sent (T is
	// when it returned): the service acted in between.
	Sent history.Time `json:"sent,omitempty"`
	// Incarnation is, for a claim, the membership lease it was made
	// under (a member event's Token).
	Incarnation int64 `json:"incarnation,omitempty"`
	// Uncertain marks a lease request whose answer never came.
	Uncertain bool `json:"uncertain,omitempty"`
	// Mode is the arm a point fired.
	Mode string `json:"mode,omitempty"`
	// Op is the ID of the operation (history.Call.ID).
	Op    string       `json:"op,omitempty"`
	Stats *workerStats `json:"stats,omitempty"`
	Msg   string       `json:"msg,omitempty"`
	// Produced is, at the end of a task that committed, the ID of the
	// operation that produced the last event it applied (markApplied).
	Produced string `json:"produced,omitempty"`
}

// The events.
const (
	evReady   = "ready"   // warm-up done, waiting for cmdGo
	evGo      = "go"      // measuring from T
	evPoint   = "point"   // an armed before-write point fired
	evResumed = "resumed" // the operation at the point goes on
	evLease   = "lease"   // a lease acquired
	evRenew   = "renew"   // a lease renewed
	evRelease = "release" // a lease released
	evValue   = "value"   // a lease's value set (SetValue answered as done)
	evStats   = "stats"   // the measured part's figures, last
	evDone    = "done"    // a task's effect was decided (Env.Task)

	// A partition member's leases and ownerships (recordingMembership),
	// and the calls it runs as an owner.
	evMember = "member" // a membership lease granted or extended (Join, Heartbeat)
	evLeave  = "leave"  // a membership lease ended (Leave)
	evClaim  = "claim"  // a partition claimed: Name "partition/N", Token its epoch
	evDisown = "disown" // a partition released while its epoch was current
	evAct    = "act"    // a call began under an ownership (Member.Do's function)
	evRefuse = "refuse" // a call's write under an ownership was refused as stale
)

// workerStats are a worker's figures over the measured part of its run.
type workerStats struct {
	// Ops counts the operations completed, whatever their outcome.
	Ops int64 `json:"ops"`
	// RoundTrips and Statements are what the worker's pool sent meanwhile;
	// OpRoundTrips and OpStatements the part of it sent on behalf of
	// operations, the rest being the approach's background work.
	RoundTrips   int64 `json:"round_trips"`
	Statements   int64 `json:"statements"`
	OpRoundTrips int64 `json:"op_round_trips"`
	OpStatements int64 `json:"op_statements"`
	// OpRiders counts the operations' statements that rode in a batch
	// behind its first: they cost no round trip of their own.
	OpRiders int64 `json:"op_riders"`
	// Connects counts the connections the pool opened, warm-up included.
	Connects int64 `json:"connects"`
	// Hits counts, per failpoint site, how often it was reached.
	Hits map[string]int64 `json:"hits,omitempty"`
	// Extra counts what the approach sent besides PostgreSQL
	// (redis_round_trips), by name.
	Extra map[string]int64 `json:"extra,omitempty"`
	// Counts are the client's own counts (Counter), warm-up included.
	Counts map[string]int64 `json:"counts,omitempty"`
	// Metrics are what the client's lockfree components recorded, warm-up
	// included, when the run collects them (workerConfig.Metrics).
	Metrics []report.Metric `json:"metrics,omitempty"`
}

// emitter writes a worker's lines, one write each.
type emitter struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

func (e *emitter) line(prefix string, b []byte) error {
	buf := make([]byte, 0, len(prefix)+len(b)+1)
	buf = append(append(append(buf, prefix...), b...), '\n')
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return e.err
	}
	if _, err := e.w.Write(buf); err != nil {
		e.err = fmt.Errorf("engine: worker output: %w", err)
	}
	return e.err
}

func (e *emitter) event(ev event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("engine: encoding event: %w", err)
	}
	return e.line(prefixEvent, b)
}

// historyWriter is the io.Writer of the worker's history.Recorder: each of
// its writes is one record, newline included.
type historyWriter struct{ e *emitter }

func (h historyWriter) Write(p []byte) (int, error) {
	n := len(p)
	if n > 0 && p[n-1] == '\n' {
		p = p[:n-1]
	}
	if err := h.e.line(prefixHistory, p); err != nil {
		return 0, err
	}
	return n, nil
}
