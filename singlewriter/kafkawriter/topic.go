package kafkawriter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/short"
)

// CreateTopic creates topic with the given number of partitions and
// replicas through the cluster's controller, and waits until every partition
// has a leader (a producer that starts earlier gets errors), or ctx ends.
// One partition per entity key range is the unit of single-writer
// parallelism: choose partitions for the consumers you will run, since
// adding partitions later moves keys to other partitions.
func CreateTopic(ctx context.Context, brokers []string, topic string, partitions, replicas int) error {
	if topic == "" || partitions < 1 || replicas < 1 {
		return fmt.Errorf("%w: topic %s with %d partitions and %d replicas", ErrInvalid, short.Quote(topic), partitions, replicas)
	}
	ctrl, err := dialController(ctx, brokers)
	if err != nil {
		return err
	}
	defer ctrl.Close()
	if err := ctrl.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: replicas}); err != nil {
		return fmt.Errorf("kafkawriter: create topic %s: %w", short.Quote(topic), err)
	}
	for {
		ps, err := ctrl.ReadPartitions(topic)
		ready := err == nil && len(ps) == partitions
		for _, p := range ps {
			ready = ready && p.Leader.Host != ""
		}
		if ready {
			return nil
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("kafkawriter: topic %s has no leaders yet: %w", short.Quote(topic), errors.Join(context.Cause(ctx), err))
		case <-t.C:
		}
	}
}

// DeleteTopic deletes topic through the cluster's controller.
func DeleteTopic(ctx context.Context, brokers []string, topic string) error {
	ctrl, err := dialController(ctx, brokers)
	if err != nil {
		return err
	}
	defer ctrl.Close()
	if err := ctrl.DeleteTopics(topic); err != nil {
		return fmt.Errorf("kafkawriter: delete topic %s: %w", short.Quote(topic), err)
	}
	return nil
}

// dialController connects to the cluster's controller (with KRaft any
// broker forwards admin requests), with ctx's deadline on the connection.
func dialController(ctx context.Context, brokers []string) (*kafka.Conn, error) {
	var errs []error
	for _, b := range brokers {
		conn, err := kafka.DialContext(ctx, "tcp", b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// The deadline bounds the controller lookup too: a broker that
		// accepts and never answers held DeleteTopic forever.
		if d, ok := ctx.Deadline(); ok {
			_ = conn.SetDeadline(d)
		}
		c, err := conn.Controller()
		conn.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ctrl, err := kafka.DialContext(ctx, "tcp", net.JoinHostPort(c.Host, strconv.Itoa(c.Port)))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if d, ok := ctx.Deadline(); ok {
			_ = ctrl.SetDeadline(d)
		}
		return ctrl, nil
	}
	return nil, fmt.Errorf("kafkawriter: no Kafka broker answers: %w", errors.Join(errs...))
}
