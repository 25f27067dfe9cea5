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
// replicas through the cluster's controller, and waits until every broker
// that answers shows every partition with a leader, or ctx ends: a producer
// that starts earlier gets errors, and a consumer group whose leader asks a
// broker that does not know the topic yet is assigned no partition.
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
		err := topicReady(ctx, ctrl, topic, partitions)
		if err == nil {
			return nil
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return fmt.Errorf("kafkawriter: topic %s is not ready on every broker: %w", short.Quote(topic), errors.Join(context.Cause(ctx), err))
		}
	}
}

// topicReady checks that every broker the cluster lists and that answers
// shows topic with its partitions, each with a leader. Brokers learn of a
// new topic from the controller one after another; a broker that has not
// yet answers a group leader's metadata request without it. A broker that
// does not answer serves no metadata, and is passed over.
func topicReady(ctx context.Context, ctrl *kafka.Conn, topic string, partitions int) error {
	brokers, err := ctrl.Brokers()
	if err != nil {
		return err
	}
	answered := 0
	for _, b := range brokers {
		err := brokerShows(ctx, net.JoinHostPort(b.Host, strconv.Itoa(b.Port)), topic, partitions)
		if errors.Is(err, errNoAnswer) {
			continue
		}
		if err != nil {
			return err
		}
		answered++
	}
	if answered == 0 {
		return errors.New("no broker answers")
	}
	return nil
}

// errNoAnswer is a broker that could not be dialled.
var errNoAnswer = errors.New("no answer")

// brokerShows checks one broker's metadata for topic, within 10 seconds.
func brokerShows(ctx context.Context, addr, topic string, partitions int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("%w: %w", errNoAnswer, err)
	}
	defer conn.Close()
	d, _ := ctx.Deadline()
	_ = conn.SetDeadline(d)
	ps, err := conn.ReadPartitions(topic)
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	if len(ps) != partitions {
		return fmt.Errorf("%s: %d of %d partitions", addr, len(ps), partitions)
	}
	for _, p := range ps {
		if p.Leader.Host == "" { // leader -1: not elected yet
			return fmt.Errorf("%s: partition %d has no leader", addr, p.ID)
		}
	}
	return nil
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
		// A busy broker may answer before it knows the controller (id
		// -1, no host): ask it again.
		for err == nil && c.Host == "" && sleep(ctx, 100*time.Millisecond) {
			c, err = conn.Controller()
		}
		conn.Close()
		if err == nil && c.Host == "" {
			err = fmt.Errorf("%s knows no controller: %w", b, context.Cause(ctx))
		}
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
