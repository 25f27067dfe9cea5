package testkafka

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// EnvClusterBrokers and EnvClusterCtl name the variables that point tests at a running
// multi-broker cluster (`KAFKA_BROKERS=3 scripts/kafka.sh env` prints both): every broker's
// address, and the command that kills, stops and starts its nodes.
const (
	EnvClusterBrokers = "TEST_KAFKA_CLUSTER_BROKERS"
	EnvClusterCtl     = "TEST_KAFKA_CLUSTER_CTL"
)

// ClusterSize is the number of brokers of the cluster the tests start: three tolerate the loss
// of one with replication factor 3 and min.insync.replicas 2.
const ClusterSize = 3

// startTimeout bounds the restart of a node: on a loaded 2-core machine a
// broker's JVM takes minutes to answer.
const startTimeout = 5 * time.Minute

// Cluster is a KRaft cluster of ClusterSize nodes run by scripts/kafka.sh, whose nodes a test
// can crash, stop and start. Node IDs are the brokers' IDs in metadata (1…ClusterSize).
type Cluster struct {
	Brokers []string // every node's address, in node ID order
	ctl     string   // a shell command prefix: "<env> scripts/kafka.sh"
}

// The cluster is started at most once per test binary, when the environment names none.
var (
	clusterOnce sync.Once
	clusterEnv  map[string]string
	clusterErr  error
)

// NewCluster returns the cluster of EnvClusterBrokers and EnvClusterCtl, or, when they are
// unset, starts this checkout's with `KAFKA_BROKERS=3 scripts/kafka.sh up` (its own ports and
// data directory, .services/kafka-cluster; left running for the next run, `down` stops it).
// A cluster that cannot be started fails t: it needs only Java and Maven, never Docker, so
// there is nothing to skip.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	brokers, ctl := os.Getenv(EnvClusterBrokers), os.Getenv(EnvClusterCtl)
	if strings.TrimSpace(brokers) == "" || strings.TrimSpace(ctl) == "" {
		clusterOnce.Do(func() { clusterEnv, clusterErr = startCluster() })
		if clusterErr != nil {
			t.Fatalf("testkafka: %s is unset and the cluster did not start: %v", EnvClusterBrokers, clusterErr)
		}
		brokers, ctl = clusterEnv[EnvClusterBrokers], clusterEnv[EnvClusterCtl]
	}
	c := &Cluster{ctl: ctl}
	for _, b := range strings.Split(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			c.Brokers = append(c.Brokers, b)
		}
	}
	if len(c.Brokers) != ClusterSize {
		t.Fatalf("testkafka: %s=%q lists %d brokers, want %d", EnvClusterBrokers, brokers, len(c.Brokers), ClusterSize)
	}
	return c
}

// startCluster runs scripts/kafka.sh up for a cluster and returns what its env prints.
func startCluster() (map[string]string, error) {
	script, err := kafkaScript()
	if err != nil {
		return nil, err
	}
	up := exec.Command(script, "up")
	up.Env = append(os.Environ(), fmt.Sprintf("KAFKA_BROKERS=%d", ClusterSize))
	up.Stdout, up.Stderr = os.Stderr, os.Stderr
	if err := up.Run(); err != nil {
		return nil, fmt.Errorf("%s up: %w", script, err)
	}
	envCmd := exec.Command(script, "env")
	envCmd.Env = up.Env
	out, err := envCmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s env: %w", script, err)
	}
	// Lines are `export NAME=VALUE`, VALUE quoted for the shell; let the shell unquote it.
	vars := map[string]string{}
	for _, name := range []string{EnvClusterBrokers, EnvClusterCtl} {
		v, err := exec.Command("bash", "-c", string(out)+`printf %s "$`+name+`"`).Output()
		if err != nil || len(v) == 0 {
			return nil, fmt.Errorf("%s env printed no %s", script, name)
		}
		vars[name] = string(v)
	}
	return vars, nil
}

// kafkaScript finds scripts/kafka.sh in the module that contains the working directory.
func kafkaScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "scripts", "kafka.sh"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Ctl is the shell command that kills, stops and starts the cluster's nodes
// when given "kill ID", "stop ID" or "start ID".
func (c *Cluster) Ctl() string { return c.ctl }

// Kill crashes node id (SIGKILL).
func (c *Cluster) Kill(t testing.TB, id int) { c.run(t, "kill", id) }

// Stop stops node id (SIGTERM: a controlled shutdown that moves its leaderships first).
func (c *Cluster) Stop(t testing.TB, id int) { c.run(t, "stop", id) }

// Start starts node id again and returns once it answers (at most startTimeout).
// The nodes' ports lie in Linux's ephemeral range: while a node is down, a
// client's connection may hold its port for a moment, and the node then
// exits, unable to bind; Start tries again, up to three times.
func (c *Cluster) Start(t testing.TB, id int) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		out, err := c.try(t, "start", id)
		if err == nil {
			return
		}
		if attempt == 3 || !strings.Contains(out, "Address already in use") {
			t.Fatalf("testkafka: %s start %d: %v\n%s", c.ctl, id, err, out)
		}
		t.Logf("testkafka: node %d: its port was taken by another socket; starting it again", id)
		time.Sleep(time.Second)
	}
}

func (c *Cluster) run(t testing.TB, verb string, id int) {
	t.Helper()
	if out, err := c.try(t, verb, id); err != nil {
		t.Fatalf("testkafka: %s %s %d: %v\n%s", c.ctl, verb, id, err, out)
	}
}

// try runs the cluster's script with verb for node id.
func (c *Cluster) try(t testing.TB, verb string, id int) (string, error) {
	t.Helper()
	start := time.Now()
	cmd := exec.Command("bash", "-c", fmt.Sprintf("%s %s %d", c.ctl, verb, id))
	// A node restarting beside other work takes minutes to load its JVM.
	cmd.Env = append(os.Environ(), fmt.Sprintf("KAFKA_START_TIMEOUT=%d", int(startTimeout.Seconds())))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Logf("testkafka: node %d: %s (%v)", id, verb, time.Since(start).Round(10*time.Millisecond))
	}
	return string(out), err
}

// Topic creates a topic with the given partitions, each replicated on every node, as
// the package-level Topic does.
func (c *Cluster) Topic(t testing.TB, partitions int) string {
	t.Helper()
	return topic(t, c.Brokers, partitions, ClusterSize)
}

// Partitions reads topic's partitions from the metadata of any node that answers.
func (c *Cluster) Partitions(topic string) ([]kafka.Partition, error) {
	deadline := time.Now().Add(10 * time.Second)
	conn, err := dialAny(c.Brokers, deadline)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	return conn.ReadPartitions(topic)
}

// Leader returns the node that leads partition p of topic, waiting up to a minute for one.
func (c *Cluster) Leader(t testing.TB, topic string, p int) int {
	t.Helper()
	var leader int
	c.waitPartitions(t, topic, "a leader of partition "+fmt.Sprint(p), func(ps []kafka.Partition) bool {
		for _, q := range ps {
			if q.ID == p && q.Leader.Host != "" {
				leader = q.Leader.ID
				return true
			}
		}
		return false
	})
	return leader
}

// WaitInSync waits until every partition of each topic (and of the group offsets' topic) has
// every replica in sync: the state a rolling restart waits for before it takes the next node
// down, so that min.insync.replicas still holds while that node is away.
func (c *Cluster) WaitInSync(t testing.TB, topics ...string) {
	t.Helper()
	for _, topic := range append(topics, "__consumer_offsets") {
		c.waitPartitions(t, topic, "every replica in sync", func(ps []kafka.Partition) bool {
			for _, p := range ps {
				if p.Leader.Host == "" || len(p.Isr) != len(p.Replicas) {
					return false
				}
			}
			return len(ps) > 0
		})
	}
}

// waitPartitions polls topic's metadata until ok, for up to two minutes (a node restarting
// on a loaded machine takes tens of seconds to catch up).
func (c *Cluster) waitPartitions(t testing.TB, topic, what string, ok func([]kafka.Partition) bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		ps, err := c.Partitions(topic)
		if err == nil && ok(ps) {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("testkafka: %s: no %s within 2m (last error: %v)", topic, what, last)
}
