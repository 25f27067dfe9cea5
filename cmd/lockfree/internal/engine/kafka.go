package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// KafkaGroupTiming is the timing of a Kafka consumer group whose members
// are a run's workers, clients of them, one member each: 2 s sessions and
// rebalances and heartbeats every 100 ms up to 8 members — short, so that a
// member killed or stopped past its session is evicted and its partitions
// taken over within a run — and as much again for every 8 members more.
// Every member must heartbeat within its session and rejoin within a
// rebalance, and the more worker processes share the cores, the longer one
// may wait for them: 64 members on 2 s rebalanced without end on a loaded
// machine (one evicted, the others too late to rejoin and evicted in turn,
// the group empty), and applied next to nothing. The broker must allow the
// session: group.min.session.timeout.ms ≤ 2000 (scripts/kafka.sh sets 1000;
// Kafka's own default, 6000, refuses the join).
func KafkaGroupTiming(clients int) GroupTiming {
	f := time.Duration(max(1, (clients+7)/8))
	return GroupTiming{Session: f * 2 * time.Second, Rebalance: f * 2 * time.Second, Heartbeat: f * 100 * time.Millisecond}
}

// GroupTiming is a consumer group's session timeout, rebalance timeout and
// heartbeat interval.
type GroupTiming struct{ Session, Rebalance, Heartbeat time.Duration }

// Lease is how long after a member stops another may take its partitions:
// its session runs out, then the group rebalances.
func (g GroupTiming) Lease() time.Duration { return g.Session + g.Rebalance }

// kafkaSkip says why an approach that needs Kafka cannot run on infra, or "".
func kafkaSkip(ctx context.Context, infra Infra) string {
	if len(infra.Kafka) == 0 {
		return "no Kafka brokers (give lockfree compare --kafka host:port, or set $KAFKA_BROKERS; scripts/kafka.sh up starts one)"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var errs []error
	for _, b := range infra.Kafka {
		conn, err := kafka.DialContext(ctx, "tcp", b)
		if err == nil {
			conn.Close()
			return ""
		}
		errs = append(errs, err)
	}
	return fmt.Sprintf("Kafka at %s does not answer: %v", strings.Join(infra.Kafka, ","), errors.Join(errs...))
}

// prepareTopic creates a KafkaUser's topic for one run, one partition per
// worker (clients), replicated on up to three brokers (a cluster whose
// min.insync.replicas is 2 refuses an acks=all write to a topic of one
// replica), and returns what deletes it.
func prepareTopic(ctx context.Context, infra Infra, topic string, clients int) (func(), error) {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	brokers, err := advertisedBrokers(cctx, infra.Kafka)
	if err != nil {
		return nil, err
	}
	if err := kafkawriter.CreateTopic(cctx, infra.Kafka, topic, clients, min(3, len(brokers))); err != nil {
		return nil, fmt.Errorf("engine: topic %s: %w", topic, err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = kafkawriter.DeleteTopic(ctx, infra.Kafka, topic) // the run's result does not depend on it
	}, nil
}

// advertisedBrokers returns the addresses the cluster at bootstrap
// advertises for its brokers: what a client dials once it has read the
// metadata, and so what a worker's proxies must stand in for. It asks again
// while the metadata lists no broker, as it does for a moment when a broker
// on a loaded machine missed its controller's session and was fenced.
func advertisedBrokers(ctx context.Context, bootstrap []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		out, err := listBrokers(ctx, bootstrap)
		if err != nil || len(out) > 0 {
			return out, err
		}
		if !Sleep(ctx, 500*time.Millisecond) {
			return nil, fmt.Errorf("engine: reading the Kafka brokers: the cluster at %s listed none: %w", strings.Join(bootstrap, ","), ctx.Err())
		}
	}
}

// listBrokers reads the advertised brokers from the first of bootstrap
// that answers.
func listBrokers(ctx context.Context, bootstrap []string) ([]string, error) {
	var errs []error
	for _, b := range bootstrap {
		conn, err := kafka.DialContext(ctx, "tcp", b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		bs, err := conn.Brokers()
		conn.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var out []string
		for _, x := range bs {
			out = append(out, net.JoinHostPort(x.Host, strconv.Itoa(x.Port)))
		}
		return out, nil
	}
	return nil, fmt.Errorf("engine: reading the Kafka brokers: %w", errors.Join(errs...))
}
