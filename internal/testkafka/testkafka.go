// Package testkafka gives integration tests a real Apache Kafka broker and fresh topics
// (ARCHITECTURE.md, "The harness").
//
// Where the broker comes from, in order:
//  1. TEST_KAFKA_BROKERS (comma-separated host:port list), e.g. from
//     `eval "$(scripts/kafka.sh env)"` after `scripts/kafka.sh up`;
//  2. otherwise, if a Docker daemon answers, one apache/kafka container per test binary started
//     with testcontainers-go (removed by its reaper when the binary exits);
//  3. otherwise the test is skipped — but with CI=true it fails, so a CI run never passes by
//     silently skipping every Kafka test.
//
// Every test should use its own topics from [Topic], so tests can share one broker and run in
// parallel.
package testkafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// EnvBrokers names the variable that points tests at a running broker.
const EnvBrokers = "TEST_KAFKA_BROKERS"

// containerImage is the broker image used when Docker is available: ≥ 4.1 because Kafka 4.0.0
// removed the JoinGroup versions kafka-go's consumer groups rely on (re-added in 4.0.1/4.1.0).
const containerImage = "apache/kafka:4.1.0"

// Brokers returns the bootstrap addresses of a Kafka broker for t, following the order in the
// package documentation. It never returns an empty list: when no broker is available it skips t
// (or, with CI=true, fails it).
func Brokers(t testing.TB) []string {
	t.Helper()
	if v := os.Getenv(EnvBrokers); strings.TrimSpace(v) != "" {
		var brokers []string
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				brokers = append(brokers, b)
			}
		}
		if len(brokers) == 0 {
			t.Fatalf("testkafka: %s=%q lists no broker", EnvBrokers, v)
		}
		return brokers
	}
	brokers, err := containerBrokers()
	switch {
	case err == nil:
		return brokers
	case errors.Is(err, errNoDocker):
		reason := EnvBrokers + " is unset and " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatalf("testkafka: %s; with CI=true Kafka tests must not be skipped: run `make test`, "+
				"or `scripts/kafka.sh up` and `eval \"$(scripts/kafka.sh env)\"` before go test", reason)
		}
		t.Skipf("testkafka: %s; run `scripts/kafka.sh up` and `eval \"$(scripts/kafka.sh env)\"` "+
			"to run this test", reason)
	default:
		t.Fatalf("testkafka: %v", err)
	}
	return nil
}

// Topic creates a topic with the given number of partitions (replication factor 1) whose name is
// unique and derived from t.Name(), waits until every partition has a leader, and deletes the
// topic when t finishes (best effort: a failed delete is only logged). It fails t if the topic
// cannot be created or does not become ready within 30 s.
func Topic(t testing.TB, brokers []string, partitions int) string {
	t.Helper()
	return topic(t, brokers, partitions, 1)
}

// topic creates a topic with the given partitions and replicas, as Topic describes.
func topic(t testing.TB, brokers []string, partitions, replicas int) string {
	t.Helper()
	if partitions < 1 {
		t.Fatalf("testkafka.Topic: partitions = %d, want ≥ 1", partitions)
	}
	topic := topicName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkawriter.CreateTopic(ctx, brokers, topic, partitions, replicas); err != nil {
		t.Fatalf("testkafka.Topic: %v", err)
	}
	t.Cleanup(func() { deleteTopic(t, brokers, topic) })
	return topic
}

// topicName turns a test name into a legal, unique topic name: characters other than
// [A-Za-z0-9_-] become '-', the name is cut to leave room, and 8 random hex digits are appended.
func topicName(testName string) string {
	var b strings.Builder
	for _, r := range testName {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	name := b.String()
	if len(name) > 200 { // Kafka allows 249 characters
		name = name[:200]
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	return name + "-" + hex.EncodeToString(suffix[:])
}

// dialAny connects to the first broker that accepts.
func dialAny(brokers []string, deadline time.Time) (*kafka.Conn, error) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var errs []error
	for _, b := range brokers {
		conn, err := kafka.DialContext(ctx, "tcp", b)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("dial %v: %w", brokers, errors.Join(errs...))
}

// deleteTopic removes topic, logging (not failing) on error: the broker may already be gone.
func deleteTopic(t testing.TB, brokers []string, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kafkawriter.DeleteTopic(ctx, brokers, topic); err != nil {
		t.Logf("testkafka: delete topic %s: %v", topic, err)
	}
}

// errNoDocker marks "no Docker daemon answers", the one container failure that skips tests.
var errNoDocker = errors.New("no Docker daemon answers")

// The container is started at most once per test binary and shared by all tests in it.
var (
	containerOnce  sync.Once
	containerAddrs []string
	containerErr   error
)

func containerBrokers() ([]string, error) {
	containerOnce.Do(func() {
		if err := dockerAnswers(); err != nil {
			containerErr = fmt.Errorf("%w (%v)", errNoDocker, err)
			return
		}
		containerAddrs, containerErr = startContainer()
	})
	return containerAddrs, containerErr
}

// dockerAnswers reports whether a Docker daemon responds; testcontainers may panic when it
// finds no Docker host at all, which counts as "no".
func dockerAnswers() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Health(ctx) // also closes p
}

// startContainer runs a single-node KRaft broker. The advertised address must be the host's
// mapped port, known only after the container starts, so the container's command waits for a
// script (written by a post-start hook) that exports KAFKA_ADVERTISED_LISTENERS and then runs
// the image's normal start command. The broker talks to itself over the BROKER listener.
// The container is not terminated here: testcontainers' reaper removes it when the binary exits.
func startContainer() ([]string, error) {
	const (
		port   = "9092/tcp"
		script = "/tmp/lockfree-kafka-env.sh"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	writeScript := func(ctx context.Context, c testcontainers.Container) error {
		if err := wait.ForMappedPort(port).WaitUntilReady(ctx, c); err != nil {
			return err
		}
		host, err := c.Host(ctx)
		if err != nil {
			return err
		}
		mapped, err := c.MappedPort(ctx, port)
		if err != nil {
			return err
		}
		env := fmt.Sprintf("export KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://%s,BROKER://127.0.0.1:9094\n",
			net.JoinHostPort(host, mapped.Port()))
		return c.CopyToContainer(ctx, []byte(env), script, 0o644)
	}
	req := testcontainers.ContainerRequest{
		Image:        containerImage,
		ExposedPorts: []string{port},
		Env: map[string]string{
			"KAFKA_NODE_ID":                                          "1",
			"KAFKA_PROCESS_ROLES":                                    "broker,controller",
			"KAFKA_LISTENERS":                                        "PLAINTEXT://0.0.0.0:9092,BROKER://0.0.0.0:9094,CONTROLLER://0.0.0.0:9093",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":                   "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
			"KAFKA_INTER_BROKER_LISTENER_NAME":                       "BROKER",
			"KAFKA_CONTROLLER_LISTENER_NAMES":                        "CONTROLLER",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                         "1@127.0.0.1:9093",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":                 "1",
			"KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS":                     "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR":         "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":                    "1",
			"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
			"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR":            "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":                 "0",
			"KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS":                     "1000",
			"KAFKA_NUM_PARTITIONS":                                   "1",
			"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                        "true",
			"KAFKA_HEAP_OPTS":                                        "-Xms256m -Xmx768m",
		},
		// The image's entrypoint execs its arguments; only the command is replaced.
		Cmd: []string{"sh", "-c",
			"while [ ! -f " + script + " ]; do sleep 0.1; done; . " + script + "; exec /etc/kafka/docker/run"},
		LifecycleHooks: []testcontainers.ContainerLifecycleHooks{{
			PostStarts: []testcontainers.ContainerHook{writeScript},
		}},
		// Runs after the hook above (user post-start hooks come before the readiness wait).
		WaitingFor: wait.ForLog("Kafka Server started").WithStartupTimeout(2 * time.Minute),
	}
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: req,
		Started:          true,
	})
	if err != nil {
		if c != nil {
			_ = c.Terminate(context.Background())
		}
		return nil, fmt.Errorf("start %s container: %w", containerImage, err)
	}
	host, err := c.Host(ctx)
	if err != nil {
		return nil, err
	}
	mapped, err := c.MappedPort(ctx, port)
	if err != nil {
		return nil, err
	}
	return []string{net.JoinHostPort(host, mapped.Port())}, nil
}
