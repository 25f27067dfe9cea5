// Package engine runs each approach to a problem — the lock-free
// alternative, the fenced lock, a naive lock, bare SQL — as real worker
// processes, injects faults into them, records every operation's history,
// and checks that history: the proof `lockfree compare` and the fault
// tests share, built so that a broken mechanism cannot pass. The engine
// knows no scenario: it runs what the scenario packages register.
//
// # Scenarios and approaches
//
// A Scenario is a problem: its schema and seed, and its check, which holds
// the merged history and the state the run left to the scenario's model (a
// porcupine search, the scenario's invariants, or both). An ApproachDef is
// one way to solve it: a small type whose NewClient runs in each worker
// process and whose Client records one operation at a time. Each registers
// itself from an init function (Register, RegisterApproach) in its
// scenario's package (cmd/lockfree/internal/scenario/<name>): the list of
// scenarios, the fault tests and the reports come from the registry. What
// the engine must know of a scenario or an approach beyond its name and
// label, each declares as a capability (capability.go): the lease that
// protects it (Protection), whether its workers commit transactions of
// their own (Committer), run a partition member (MemberRunner), hold events
// fetched from a stream (Fetcher), consume from Kafka (KafkaUser), need a
// service such as Redis (Requirer), which faults mean nothing in its runs
// and why (FaultSkipper), and where the failover fault stops its victim
// (FailoverTarget).
//
// # Workers
//
// Every client runs in its own OS process: the coordinator re-executes its
// own binary with LOCKFREE_HARNESS_WORKER set (the lockfree binary, or a
// test binary whose TestMain checks IsWorker and calls WorkerMain), in its
// own process group, sends it its configuration on stdin, and reads its
// history and events on stdout. A worker warms up (its operations recorded
// and checked, not measured), runs operations from "go" until "halt", and
// reports its figures: the statements and round trips its pool sent,
// counted by a pgx tracer. A worker that dies is reported; its operations
// in flight count as of unknown outcome.
//
// # Faults
//
// Each fault is a file of its own (fault_<name>.go) and one line of
// faultKinds: a description (the fault interface: its name, how it is
// injected, when it counts, and the traits it has) whose start makes the
// injector of one approach's run, with that run's state of the fault; a
// fault with a part in each worker has an agent there (agent.go). Every
// fault that hits one worker hits it at a before-write point: a
// failpoint.Inject in library
// code (or Env.BeforeWrite in the lab's own approaches) between an operation's read, claim or acquire and its write,
// armed by a command on the worker's stdin and fired once. Pause stops the
// process there with SIGSTOP; once /proc shows the process stopped, the
// coordinator waits past the lease that protects the approach (its
// ApproachDef's Protection), sends another worker to the key (the taker:
// cmdDirect, Env.Directed), and waits until a worker has taken the key
// over — a newer lease, a completed operation, or that worker held at its
// own before-write point on the key — and only then sends SIGCONT, letting
// the held worker go on once the stale operation has completed. The pause
// counts once another worker came for the key, taken over or kept out
// (the report counts the takeovers apart); one no worker came for does
// not. Stall blocks the operation's goroutine instead, the rest of the
// process running. Isolate and Delay cut the worker off at the point: its
// own proxy of the database (and, for an approach that consumes from
// Kafka, one of each broker) holds every byte, its write included, past
// the lease and the taker, and then resets the connections (Isolate) or
// delivers the bytes late (Delay); they count only when the proxies held
// bytes and a taker came. A
// consumer's background work that a fault may stop is a task (Env.Task):
// the coordinator waits for its transaction to end before the worker held
// behind it goes on. Restart restarts the
// server; broker-kill kills the Kafka broker that leads the run's topic
// and starts it again (Infra.Brokers). A run in which a requested fault never took effect fails with
// ErrNotInjected. An approach whose run could not be made (its workers did
// not get ready in time) is reported as failed, with why, and the run goes
// on with the next approach; the run's error then matches
// ErrApproachFailed.
//
// # Checks and figures
//
// The history of every worker, warm-up included, is merged (history.Read)
// and checked by the scenario; a check that could not finish shows "—",
// never 0. Every run is also held to the exclusivity of its leases: the
// workers report each lease their lock service grants, renews and releases,
// and a partition member its memberships, claims, releases and calls, each
// with the time its request was sent, and two grants in force at once by
// the service's own rules, a lease renewed after it expired, a release
// answered as done after a later grant of the name, or a call after its
// ownership lapsed count as violations (tenures.go): a fence
// refuses a stale holder's write whoever holds the lock, so only this sees
// a lock whose exclusivity broke. The report counts the faults injected
// per approach, the
// operations of the measured part, the round trips and statements per
// operation, and draws a timeline: lease tenures, faults, writes accepted,
// refused and uncertain, and each violation on the write it blames, with a
// reference to the write it clobbered.
package engine
