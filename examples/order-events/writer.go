package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/singlewriter"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// The single writer, deployed two ways: a Kafka consumer group, or
// in-process actors. Both run the same handler as main.go's applyTx.

// runKafka sends the order's events, keyed by order, to a new topic and
// applies them with a kafkawriter.Consumer.
func runKafka(ctx context.Context, cfg config, w io.Writer) error {
	s := &pgOrders{db: cfg.DB}
	if err := s.reset(ctx); err != nil {
		return err
	}
	topic, drop, err := newTopic(ctx, cfg.Kafka)
	if err != nil {
		return err
	}
	defer drop()

	pause := newPauser(cfg.Pause)
	src := kafkawriter.Source{Brokers: cfg.Kafka, Topic: topic, GroupID: topic + "-appliers"}
	c, err := kafkawriter.NewConsumer(cfg.DB, src, handler(pause.at), nil)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil { // returns once the consumer has joined its group
		return err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()

	p, err := kafkawriter.NewProducer(cfg.Kafka, topic, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	for _, ev := range events {
		value, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if err := p.Send(ctx, ev.Order, value); err != nil { // one after another: their order is the partition's
			return err
		}
	}
	if err := pause.hold(ctx, cfg.DB, c.Stopped()); err != nil {
		return err
	}
	if err := allApplied(ctx, s, c); err != nil {
		return err
	}
	return describe(ctx, w, "single writer (kafka)", s, 0)
}

// runActors applies the order's events through a singlewriter.Group: the
// order's shard applies them one at a time.
func runActors(ctx context.Context, cfg config, w io.Writer) error {
	pause := newPauser(cfg.Pause)
	var (
		s     orders
		apply func(ctx context.Context, ev event) error
		stop  func(ctx context.Context) error
	)
	if cfg.DB != nil {
		// Each shard applies its orders' events to PostgreSQL, one
		// transaction at a time.
		g, err := singlewriter.NewGroup(4, func(int) struct{} { return struct{}{} }, nil)
		if err != nil {
			return err
		}
		s, stop = &pgOrders{db: cfg.DB}, g.Stop
		apply = func(ctx context.Context, ev event) error {
			return g.Do(ctx, ev.Order, func(*struct{}) error {
				return pgx.BeginFunc(ctx, cfg.DB, func(tx pgx.Tx) error {
					return applyTx(ctx, tx, ev, func() { pause.at(ev) })
				})
			})
		}
	} else {
		// Each shard owns its orders' state: no other goroutine touches it.
		g, err := singlewriter.NewGroup(4, func(int) map[string]*orderRow { return map[string]*orderRow{} }, nil)
		if err != nil {
			return err
		}
		s, stop = actorOrders{g}, g.Stop
		apply = func(ctx context.Context, ev event) error {
			return g.Do(ctx, ev.Order, func(shard *map[string]*orderRow) error {
				o := (*shard)[ev.Order] // no lock: only this shard's goroutine touches it
				if o == nil {
					o = &orderRow{status: "new"}
					(*shard)[ev.Order] = o
				}
				if ev.Seq <= o.lastSeq {
					return nil // sent twice
				}
				pause.at(ev)
				o.apply(ev)
				return nil
			})
		}
	}
	defer func() { _ = stop(context.WithoutCancel(ctx)) }()
	if err := s.reset(ctx); err != nil {
		return err
	}
	// The events arrive one after another, as from the order's partition.
	fed := make(chan struct{})
	var feedErr error
	go func() {
		defer close(fed)
		for _, ev := range events {
			if feedErr = apply(ctx, ev); feedErr != nil {
				return
			}
		}
	}()
	err := pause.hold(ctx, cfg.DB, fed)
	<-fed
	if err := errors.Join(err, feedErr); err != nil {
		return err
	}
	return describe(ctx, w, "single writer (actors)", s, 0)
}

// newTopic creates a topic of three partitions for this run; drop deletes
// it, best effort.
func newTopic(ctx context.Context, brokers []string) (topic string, drop func(), err error) {
	topic = fmt.Sprintf("lockfree-example-orders-%08x", rand.Uint32())
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := kafkawriter.CreateTopic(tctx, brokers, topic, 3, 1); err != nil {
		return "", nil, err
	}
	return topic, func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = kafkawriter.DeleteTopic(dctx, brokers, topic)
	}, nil
}

// allApplied waits until the consumer c has applied every event to s.
func allApplied(ctx context.Context, s orders, c *kafkawriter.Consumer) error {
	for {
		last, err := s.lastSeq(ctx)
		if err != nil {
			return err
		}
		if last == int64(len(events)) {
			return nil
		}
		select {
		case <-c.Stopped():
			return fmt.Errorf("the consumer stopped: %w", c.Stop(ctx))
		case <-ctx.Done():
			return fmt.Errorf("%d of %d events applied: %w", last, len(events), context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pauser makes the first event's apply stop between its read and its write,
// as the lock-based worker did.
type pauser struct {
	on               bool
	once             sync.Once
	paused, resumeCh chan struct{}
}

func newPauser(on bool) *pauser {
	return &pauser{on: on, paused: make(chan struct{}), resumeCh: make(chan struct{})}
}

// at is called by the apply of ev between its read and its write.
func (p *pauser) at(ev event) {
	if !p.on || ev.Seq != 1 {
		return
	}
	p.once.Do(func() {
		close(p.paused)
		<-p.resumeCh
	})
}

// hold waits until the first event's apply has paused, keeps it paused as
// long as the lock's lease (on PostgreSQL; the memory backend has no clock
// to wait for), and resumes it. Nothing expires meanwhile: the order's later
// events wait behind it on their single writer. It returns an error if the
// writer ends (ended is closed) before the pause.
func (p *pauser) hold(ctx context.Context, db *pgxpool.Pool, ended <-chan struct{}) error {
	if !p.on {
		return nil
	}
	defer close(p.resumeCh)
	select {
	case <-p.paused:
	case <-ended:
		return errors.New("the writer ended before the pause")
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if db != nil {
		select {
		case <-time.After(ttl):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}
