package engine

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// The broker-kill fault.
const (
	// BrokerKill kills the Kafka broker that leads the run's topic
	// mid-run (SIGKILL) and starts it again.
	BrokerKill Fault = "broker-kill"
	// BrokerKillFailed counts, in a report, the kills whose broker could
	// not be found, killed or started again; it is not a fault to ask for.
	BrokerKillFailed Fault = "broker-kill-failed"
)

// Brokers kills and starts the Kafka nodes of Infra.Kafka, each named by
// its node ID, the broker ID its metadata gives: scripts/kafka.sh's kill
// and start.
type Brokers interface {
	// Kill crashes node id (SIGKILL).
	Kill(ctx context.Context, id int) error
	// Start starts node id again and returns once it answers.
	Start(ctx context.Context, id int) error
}

// ShellBrokers controls the nodes with a shell command to which "kill ID"
// and "start ID" are appended (`KAFKA_BROKERS=3 scripts/kafka.sh`).
type ShellBrokers string

// Kill implements Brokers.
func (s ShellBrokers) Kill(ctx context.Context, id int) error { return s.run(ctx, "kill", id) }

// Start implements Brokers.
func (s ShellBrokers) Start(ctx context.Context, id int) error { return s.run(ctx, "start", id) }

func (s ShellBrokers) run(ctx context.Context, verb string, id int) error {
	out, err := exec.CommandContext(ctx, "bash", "-c", fmt.Sprintf("%s %s %d", s, verb, id)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s %d: %w: %s", s, verb, id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// brokerFailover bounds how long a cluster has to move the killed broker's
// leadership to another (a KRaft controller notices a dead broker within
// its session timeout, 9 s by default), brokerRestart how long a killed
// node has to answer again: a JVM restarting on a loaded 2-core machine
// takes minutes.
const (
	brokerFailover = time.Minute
	brokerRestart  = 5 * time.Minute
)

type brokerKill struct{}

func (brokerKill) Name() Fault { return BrokerKill }
func (brokerKill) How() string {
	return "SIGKILLs of the Kafka broker that leads the run's topic, a third of the way into the run, started again once another broker leads its partition (at once on a single broker)"
}
func (brokerKill) counts() string {
	return "the broker was killed and answers again; else `broker-kill-failed`"
}
func (brokerKill) wholeRun()             {}
func (brokerKill) start(r *run) injector { return brokerKillRun{r} }

// check refuses a run that asks for the fault with no way to kill a broker.
func (brokerKill) check(_ Config, infra Infra) error {
	if infra.Brokers == nil || len(infra.Kafka) == 0 {
		return fmt.Errorf("%w: the broker-kill fault needs Kafka brokers and a command that kills and starts them (--kafka-ctl)", ErrInvalid)
	}
	return nil
}

// skip: only an approach that publishes to or consumes from Kafka meets a
// broker.
func (brokerKill) skip(_ Scenario, def ApproachDef) string {
	if _, ok := def.(KafkaUser); ok {
		return ""
	}
	return "it uses no Kafka"
}

// done: a kill that failed has had its one chance.
func (brokerKill) done(count func(Fault) int64) bool {
	return count(BrokerKill) > 0 || count(BrokerKillFailed) > 0
}

type brokerKillRun struct{ r *run }

// killer is an injector that hits no worker in particular: a random
// schedule plays it with kill, when it is due.
type killer interface{ kill(ctx context.Context) }

// inject kills, a third of the way into the run, the broker that leads the
// first partition of the run's topic (kill).
func (b brokerKillRun) inject(ctx context.Context, _ *proc) {
	if Sleep(ctx, b.r.cfg.Duration/3) {
		b.kill(ctx)
	}
}

// kill kills the broker that leads the first partition of the run's topic,
// waits on a cluster until another broker leads that partition, starts the
// killed one again, and counts the fault once it answers.
func (b brokerKillRun) kill(ctx context.Context) {
	r := b.r
	ctx = context.WithoutCancel(ctx) // a killed broker is started again whatever the run does
	from := history.Now()
	id, err := b.killLeader(ctx)
	if err != nil {
		r.log.count(BrokerKillFailed)
		r.log.note("broker-kill failed: %v", err)
		return
	}
	r.log.count(BrokerKill)
	r.log.span(-1, report.SpanRestart, from, history.Now(), fmt.Sprintf("Kafka broker %d killed and started again", id))
}

// killLeader kills the leader of the topic's first partition and starts it
// again, once another broker leads the partition when there is one.
func (b brokerKillRun) killLeader(ctx context.Context) (int, error) {
	r := b.r
	lctx, cancel := context.WithTimeout(ctx, brokerFailover)
	defer cancel()
	leader, err := partitionLeader(lctx, r.infra.Kafka, r.topic, -1)
	if err != nil {
		return 0, err
	}
	if err := r.infra.Brokers.Kill(ctx, leader); err != nil {
		return leader, err
	}
	var moved error
	if len(r.infra.Kafka) > 1 {
		_, moved = partitionLeader(lctx, r.infra.Kafka, r.topic, leader)
	}
	sctx, cancel := context.WithTimeout(ctx, brokerRestart)
	defer cancel()
	return leader, errors.Join(moved, r.infra.Brokers.Start(sctx, leader))
}

// partitionLeader returns the broker that leads partition 0 of topic, any
// but not (-1 takes any), asking the brokers of bootstrap until one names
// such a leader or ctx ends.
func partitionLeader(ctx context.Context, bootstrap []string, topic string, not int) (int, error) {
	var last error
	for {
		for _, b := range bootstrap {
			id, err := readLeader(ctx, b, topic)
			if err == nil && id != not {
				return id, nil
			}
			if err != nil {
				last = err
			}
		}
		if !Sleep(ctx, 200*time.Millisecond) {
			return 0, fmt.Errorf("engine: no broker other than %d leads partition 0 of %s: %w", not, topic, errors.Join(last, ctx.Err()))
		}
	}
}

// readLeader reads the leader of topic's partition 0 from broker b.
func readLeader(ctx context.Context, b, topic string) (int, error) {
	conn, err := kafka.DialContext(ctx, "tcp", b)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	ps, err := conn.ReadPartitions(topic)
	if err != nil {
		return 0, err
	}
	for _, p := range ps {
		if p.ID == 0 && p.Leader.Host != "" {
			return p.Leader.ID, nil
		}
	}
	return 0, fmt.Errorf("engine: partition 0 of %s has no leader", topic)
}
