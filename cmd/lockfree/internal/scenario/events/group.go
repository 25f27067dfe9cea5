package events

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// The statements of the unfenced twins' progress: per entity, the offset of
// the last event applied, in kafkawriter's progress table (so that the
// check's trigger sees a write that moves it back), read and written plainly
// — whatever holder wrote it since.
const (
	sqlEventsProgress      = `SELECT last_seq FROM lockfree_entity_progress WHERE name = $1`
	sqlEventsProgressWrite = `INSERT INTO lockfree_entity_progress (name, last_seq) VALUES ($1, $2)
	ON CONFLICT (name) DO UPDATE SET last_seq = EXCLUDED.last_seq`
)

// entityLock runs fn holding entity's lock, named name, with the lease's
// token (0 when the lock has none), as Locker.Do does.
type entityLock func(ctx context.Context, name string, fn func(token int64) error) error

// groupConsumer is the unfenced twins' consumer: every worker a member of the
// run's consumer group (kafka-go's Reader, as kafkawriter.FencedConsumer
// reads), and, per fetched batch, per entity: lock the entity (lock) → plain
// read of its progress → skip the events applied → apply the rest and write
// the progress in one transaction, one pipelined batch → release; then commit
// the batch's offsets. It differs from the fenced twin by the fence alone: its
// read stamps nothing and its write carries no token, so a holder stopped past
// its lease (and its session: another member has its partition) commits a
// batch the member that took over applied too. It runs from startGroup until
// close.
type groupConsumer struct {
	env    *engine.Env
	topic  string
	holder string
	lock   entityLock
	point  string // the before-write point's name
	dead   *groupDeadLetters
	faults handlerFaults
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// groupBatch is the most messages a fetch takes, as the fenced twin's
// BatchSize; groupBatchWait how long it waits for more after its first.
const (
	groupBatch     = 100
	groupBatchWait = 10 * time.Millisecond
)

// startGroup starts a member of the run's group and returns once it has
// joined, or with ctx's error.
func startGroup(ctx context.Context, env *engine.Env, topic, holder, point string, lock entityLock) (*groupConsumer, error) {
	dlq, err := runDeadLetters(ctx, env, topic)
	if err != nil {
		return nil, err
	}
	timing := engine.KafkaGroupTiming(env.Clients)
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: env.Kafka, GroupID: topic, Topic: topic, Dialer: kafkaDialer(env),
		SessionTimeout: timing.Session, RebalanceTimeout: timing.Rebalance, HeartbeatInterval: timing.Heartbeat,
		JoinGroupBackoff: 500 * time.Millisecond, MaxWait: 500 * time.Millisecond, StartOffset: kafka.FirstOffset,
	})
	rctx, cancel := context.WithCancel(context.Background())
	g := &groupConsumer{env: env, topic: topic, holder: holder, lock: lock, point: point, cancel: cancel,
		dead: newGroupDeadLetters(env, dlq)}
	g.done.Add(1)
	go g.run(rctx, r)
	for r.Stats().Rebalances == 0 { // kafka-go reports joining by counting generations
		if !engine.Sleep(ctx, 10*time.Millisecond) {
			g.close()
			return nil, errors.Join(errors.New("harness: events: joining the consumer group"), ctx.Err())
		}
	}
	return g, nil
}

func (g *groupConsumer) run(ctx context.Context, r *kafka.Reader) {
	defer g.done.Done()
	defer r.Close()
	defer g.dead.close()
	for ctx.Err() == nil {
		batch, err := fetchBatch(ctx, r)
		if err != nil {
			engine.Sleep(ctx, 5*time.Millisecond)
			continue
		}
		if !g.consume(ctx, batch) {
			return // closing: the batch stays uncommitted
		}
		// A failed commit (a rebalance took the partition) leaves the
		// offsets to the next member, which finds the events applied.
		_ = r.CommitMessages(ctx, batch...)
	}
}

// fetchBatch fetches a message, then more for up to groupBatchWait.
func fetchBatch(ctx context.Context, r *kafka.Reader) ([]kafka.Message, error) {
	m, err := r.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	batch := []kafka.Message{m}
	wctx, cancel := context.WithTimeout(ctx, groupBatchWait)
	defer cancel()
	for len(batch) < groupBatch {
		m, err := r.FetchMessage(wctx)
		if err != nil {
			break // the wait is over; the message, if any, stays queued
		}
		batch = append(batch, m)
	}
	return batch, nil
}

// consume applies batch, each entity's consecutive messages under one lock
// tenure, retrying a run until it is applied; false once ctx has ended. A
// run whose handler fails (a hostile event) is retried one message at a
// time, as kafkawriter's consumers do: each message up to maxAttempts
// times, then dead-lettered.
func (g *groupConsumer) consume(ctx context.Context, batch []kafka.Message) bool {
	for len(batch) > 0 {
		n := 1
		for n < len(batch) && batch[n].Partition == batch[0].Partition && string(batch[n].Key) == string(batch[0].Key) {
			n++
		}
		run := batch[:n]
		// The lock's and progress's name, as the fenced twin's:
		// "<len(topic)>:<topic>/<partition>/<key>".
		name := strconv.Itoa(len(g.topic)) + ":" + g.topic + "/" + strconv.Itoa(run[0].Partition) + "/" + string(run[0].Key)
		if err := g.locked(ctx, name, run); err != nil && !g.oneByOne(ctx, name, run) {
			return false
		}
		batch = batch[n:]
	}
	return ctx.Err() == nil
}

// locked applies run under its entity's lock, retrying until it is
// applied (nil), its handler fails (that error), or ctx ends (ctx's).
func (g *groupConsumer) locked(ctx context.Context, name string, run []kafka.Message) error {
	for {
		err := g.lock(g.env.Background(ctx, lockEntity(name)), name, func(token int64) error {
			return g.apply(ctx, name, token, run)
		})
		if err == nil || isHandlerFailure(err) {
			return err
		}
		if !engine.Sleep(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// oneByOne applies run's messages one at a time, each tried up to
// maxAttempts times, then dead-lettered and recorded as done in the
// entity's progress, so that a delivery again skips it; false once ctx has
// ended.
func (g *groupConsumer) oneByOne(ctx context.Context, name string, run []kafka.Message) bool {
	for _, m := range run {
		delay := retryBackoff
		for attempt := 1; ; attempt++ {
			err := g.locked(ctx, name, []kafka.Message{m})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return false
			}
			if attempt < maxAttempts {
				engine.Sleep(ctx, delay)
				delay *= 2
				continue
			}
			parked := false
			if err := g.dead.send(ctx, m, attempt, err); errors.Is(err, errDeadLetterRefused) {
				parked = true
			} else if err != nil {
				return false
			}
			for g.lock(g.env.Background(ctx, lockEntity(name)), name, func(int64) error {
				return g.skip(ctx, name, m, parked)
			}) != nil {
				if !engine.Sleep(ctx, 5*time.Millisecond) {
					return false
				}
			}
			break
		}
	}
	return true
}

// skip records m, a dead-lettered message, as done in the entity's
// progress, unless the progress is past it: a plain read and write, as the
// twin's applications. A message the dead-letter topic refused for good
// (parked) is parked in the dead_letters table in the same transaction.
func (g *groupConsumer) skip(ctx context.Context, name string, m kafka.Message, parked bool) error {
	after := int64(-1)
	err := g.env.DB.QueryRow(ctx, sqlEventsProgress, name).Scan(&after)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) || after >= m.Offset {
		return err
	}
	return pgx.BeginFunc(ctx, g.env.DB, func(tx pgx.Tx) error {
		if parked {
			e, err := decodeEvent(m.Value)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, sqlDeadLetterPark, e.entity, e.seq, recordName(m.Topic, m.Partition, m.Offset)); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, sqlEventsProgressWrite, name, m.Offset)
		return err
	})
}

// isHandlerFailure reports whether err is a hostile event's handler error
// (handlerFaults), which the consumer retries one message at a time and
// dead-letters, rather than the infrastructure's, retried as it is.
func isHandlerFailure(err error) bool {
	return errors.Is(err, errPoison) || errors.Is(err, errPoisonBig) || errors.Is(err, errPoisonLong) || errors.Is(err, errTransient)
}

// apply is a run's work under its entity's lock: a plain read of the
// progress, then the events above it and the new progress in one
// transaction, pipelined. The statements run on the consumer's context: a
// stopped process does not see its lease end.
func (g *groupConsumer) apply(ctx context.Context, name string, token int64, run []kafka.Message) error {
	after := int64(-1)
	err := g.env.DB.QueryRow(ctx, sqlEventsProgress, name).Scan(&after)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	b := &pgx.Batch{}
	var evs []pendingEvent
	for _, m := range run {
		if m.Offset <= after {
			continue // applied already: skipped
		}
		e, err := decodeEvent(m.Value)
		if err != nil {
			return err
		}
		evs = append(evs, e)
		b.Queue(sqlEventsApplyKafka, e.entity, e.seq, e.by, g.holder, nil, m.Topic, m.Partition)
	}
	if b.Len() == 0 {
		return nil
	}
	if err := g.faults.failAny(evs); err != nil {
		return err
	}
	b.Queue(sqlEventsProgressWrite, name, run[len(run)-1].Offset)
	tctx, done := g.env.Task(ctx, lockEntity(name), token)
	defer done()
	g.env.BeforeWrite(tctx, g.point)
	return pgx.BeginFunc(ctx, g.env.DB, func(tx pgx.Tx) error {
		g.env.BeforeWrite(tctx, "harness.events.group.in-tx")
		return tx.SendBatch(ctx, b).Close()
	})
}

// close leaves the group: the batch in flight is not committed to Kafka, and
// the next member gets it again.
func (g *groupConsumer) close() {
	g.cancel()
	g.done.Wait()
}
