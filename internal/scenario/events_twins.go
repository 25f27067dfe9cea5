package scenario

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// The twins of the events scenario: competing consumers that apply each run
// of an entity's events under the entity's lease lock. The fenced lock is
// kafkawriter's (FencedConsumer, Fenced); the naive lock is the harness's
// own, built here from the same pieces — fencedlock.Locker, the same batches
// and runs, the same progress table and statements — without the token
// conditions, so that the pair differs only in the fence.

// twinLocks is the lock configuration of both twins. Renewals are off: the
// pause fault models a stalled process, whose keepalive stalls with it, so
// the lease does expire and the other consumer takes the entity over.
func (w *events) twinLocks(holder string) fencedlock.LockerConfig {
	return fencedlock.LockerConfig{Holder: holder, TTL: w.env.LeaseTTL, Wait: w.lockWait(),
		Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true}}
}

func (w *events) lockWait() *fencedlock.WaitConfig {
	return &fencedlock.WaitConfig{MinDelay: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond}
}

// The naive lock's progress statements: kafkawriter's fenced read and write
// without their token conditions (the read still sets the row's token, and
// creates the row on an entity's first event, in the same one statement).
const (
	naiveProgressRead = `INSERT INTO {{entity_progress}} AS p (name, last_seq, fencing_token) VALUES ($1, -1, $2)
		ON CONFLICT (name) DO UPDATE SET fencing_token = $2
		RETURNING last_seq`
	naiveProgressWrite = `UPDATE {{entity_progress}} SET last_seq = $2 WHERE name = $1`
)

// runApplier applies the events of one entity up to seq under the entity's
// lock, as kafkawriter.Fenced.Apply does: fn gets the highest sequence
// number already applied.
type runApplier func(ctx context.Context, entity string, seq int64, fn kafkawriter.ApplyFunc) (applied bool, err error)

// naiveApplier is Fenced.Apply without the fence, on PostgreSQL.
func (w *events) naiveApplier(holder string) (runApplier, error) {
	locker, err := fencedlock.NewLocker(w.locks, &fencedlock.LockerConfig{Holder: holder, TTL: w.env.LeaseTTL,
		Wait: w.lockWait(), Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true}, LockPrefix: "naive/"})
	if err != nil {
		return nil, err
	}
	read := migrate.Render(naiveProgressRead, migrate.Names{})
	write := migrate.Render(naiveProgressWrite, migrate.Names{})
	db := w.env.DB
	return func(ctx context.Context, entity string, seq int64, fn kafkawriter.ApplyFunc) (applied bool, err error) {
		err = locker.Do(ctx, entity, func(_ context.Context, lease fencedlock.Lease) error {
			var after int64
			if err := db.QueryRow(ctx, read, entity, lease.Token).Scan(&after); err != nil {
				return err
			}
			if seq <= after {
				return nil
			}
			applied = true
			return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				if err := fn(ctx, tx, after); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, write, entity, seq)
				return err
			})
		})
		return applied && err == nil, err
	}, nil
}

// startTwins starts the twins' two competing Kafka consumers, each in a
// group of its own so that both receive every event.
func (w *events) startTwins(ctx context.Context) error {
	for i := 0; i < eventsConsumers; i++ {
		holder := "consumer-" + strconv.Itoa(i)
		src := kafkawriter.Source{Brokers: w.env.Kafka, Topic: w.topic, GroupID: w.topic + "-twin-" + strconv.Itoa(i)}
		var c consumer
		if w.approach == FencedLock {
			f, err := kafkawriter.NewFencedConsumer(w.env.DB, w.locks, src, w.handle, &kafkawriter.FencedConsumerConfig{
				LockerConfig: w.twinLocks(holder), Stream: w.topic, BatchSize: eventsBatch, RetryBackoff: 10 * time.Millisecond,
				SessionTimeout: eventsSession, RebalanceTimeout: eventsSession, HeartbeatInterval: time.Second,
			})
			if err != nil {
				return err
			}
			w.twins = append(w.twins, f)
			c = f
		} else {
			apply, err := w.naiveApplier(holder)
			if err != nil {
				return err
			}
			n := &naiveConsumer{w: w, src: src, apply: apply}
			w.naives = append(w.naives, n)
			c = n
		}
		if err := w.start(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// naiveConsumer is the naive lock's competing consumer: FencedConsumer's
// loop — fetch a batch, drop redeliveries, apply each run of one entity's
// events, commit the batch to Kafka — on the naive applier.
type naiveConsumer struct {
	w       *events
	src     kafkawriter.Source
	apply   runApplier
	handled atomic.Int64 // messages applied or found applied
	cancel  context.CancelFunc
	done    chan struct{}
}

func (n *naiveConsumer) Start(ctx context.Context) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: n.src.Brokers, GroupID: n.src.GroupID, Topic: n.src.Topic, StartOffset: kafka.FirstOffset,
		SessionTimeout: eventsSession, RebalanceTimeout: eventsSession, HeartbeatInterval: time.Second,
		JoinGroupBackoff: 500 * time.Millisecond, MaxWait: 500 * time.Millisecond,
	})
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel, n.done = cancel, make(chan struct{})
	go func() {
		defer close(n.done)
		defer r.Close()
		n.run(run, r)
	}()
	return nil
}

func (n *naiveConsumer) Stop(context.Context) error {
	n.cancel()
	<-n.done
	return nil
}

func (n *naiveConsumer) Stopped() <-chan struct{} { return n.done }

func (n *naiveConsumer) run(ctx context.Context, r *kafka.Reader) {
	next := map[int]int64{}
	for ctx.Err() == nil {
		batch, err := fetchEvents(ctx, r)
		if err != nil {
			sleepCtx(ctx, 10*time.Millisecond)
			continue
		}
		fresh := batch[:0:0]
		for _, m := range batch {
			if x, ok := next[m.Partition]; !ok || m.Offset >= x {
				next[m.Partition] = m.Offset + 1
				fresh = append(fresh, m)
			}
		}
		for _, run := range eventRuns(fresh) {
			if !n.applyRun(ctx, run) {
				return
			}
		}
		_ = r.CommitMessages(ctx, batch...)
	}
}

// applyRun applies one run of an entity's messages, retrying failures until
// ctx ends (false).
func (n *naiveConsumer) applyRun(ctx context.Context, run []kafka.Message) bool {
	entity := strconv.Itoa(run[0].Partition) + "/" + string(run[0].Key)
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		_, err := n.apply(ctx, entity, run[len(run)-1].Offset, func(ctx context.Context, tx pgx.Tx, after int64) error {
			for _, m := range run {
				if m.Offset > after {
					if err := n.w.handle(ctx, tx, m); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err == nil {
			n.handled.Add(int64(len(run)))
			return true
		}
		if !sleepCtx(ctx, delay) {
			return false
		}
	}
}

// fetchEvents is FencedConsumer's fetch: one message, waited for, then what
// arrives within 10ms, up to a batch.
func fetchEvents(ctx context.Context, r *kafka.Reader) ([]kafka.Message, error) {
	m, err := r.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	batch := []kafka.Message{m}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	for len(batch) < eventsBatch {
		m, err := r.FetchMessage(wctx)
		if err != nil {
			break
		}
		batch = append(batch, m)
	}
	return batch, nil
}

// eventRuns splits a batch into runs of consecutive messages of one entity
// (partition and key), as FencedConsumer does.
func eventRuns(batch []kafka.Message) [][]kafka.Message {
	var runs [][]kafka.Message
	for _, m := range batch {
		if n := len(runs); n > 0 && runs[n-1][0].Partition == m.Partition && string(runs[n-1][0].Key) == string(m.Key) {
			runs[n-1] = append(runs[n-1], m)
			continue
		}
		runs = append(runs, []kafka.Message{m})
	}
	return runs
}

// queueApplier applies the events seqs (ascending) of entity k that are not
// applied yet, under the entity's lock.
type queueApplier func(ctx context.Context, k int, seqs []int64) error

// queued is apply for the in-process queue's events on PostgreSQL.
func (w *events) queued(apply runApplier) queueApplier {
	return func(ctx context.Context, k int, seqs []int64) error {
		_, err := apply(ctx, w.keys[k], seqs[len(seqs)-1], func(ctx context.Context, tx pgx.Tx, after int64) error {
			for _, seq := range seqs {
				if seq > after {
					if err := w.applyTx(ctx, tx, k, seq); err != nil {
						return err
					}
				}
			}
			return nil
		})
		return err
	}
}

// startQueueTwins starts the twins without Kafka: two competing consumers
// of every partition of the in-memory queue, each applying runs of one
// entity's events — on PostgreSQL through kafkawriter.Fenced or the naive
// applier, on memory through memTwin.
func (w *events) startQueueTwins(runCtx context.Context) error {
	w.queue = newMemQueue(eventsPartitions)
	if w.env.Memory() {
		w.mem = make([]memEntity, len(w.keys))
	}
	for c := 0; c < eventsConsumers; c++ {
		holder := "consumer-" + strconv.Itoa(c)
		var apply queueApplier
		switch {
		case w.env.Memory():
			m, err := w.memTwin(holder)
			if err != nil {
				return err
			}
			apply = m
		case w.approach == FencedLock:
			f, err := kafkawriter.NewFenced(w.env.DB, w.locks, &kafkawriter.FencedConfig{LockerConfig: w.twinLocks(holder)})
			if err != nil {
				return err
			}
			apply = w.queued(func(ctx context.Context, entity string, seq int64, fn kafkawriter.ApplyFunc) (bool, error) {
				return f.Apply(ctx, "events", entity, seq, fn)
			})
		default:
			n, err := w.naiveApplier(holder)
			if err != nil {
				return err
			}
			apply = w.queued(n)
		}
		for p := 0; p < eventsPartitions; p++ {
			w.run(func() error { w.consume(runCtx, c, p, apply); return nil })
		}
	}
	w.completed = func() int64 {
		n := w.processed[0].Load()
		for c := 1; c < eventsConsumers; c++ {
			n = min(n, w.processed[c].Load())
		}
		return n
	}
	return nil
}

// consume is one in-process competing consumer's reader of one partition:
// every event, in order, in runs of one entity's events of up to a batch,
// each retried until it is applied or found applied. A fenced attempt is
// retried too: the fence says only that this holder's tenure is over.
func (w *events) consume(ctx context.Context, c, p int, apply queueApplier) {
	for off := 0; ; {
		evs, ok := w.queue.read(ctx, p, off)
		if !ok {
			return
		}
		evs = evs[:min(len(evs), eventsBatch)]
		for len(evs) > 0 {
			n := 1
			for n < len(evs) && evs[n].k == evs[0].k {
				n++
			}
			seqs := make([]int64, n)
			for i, ev := range evs[:n] {
				seqs[i] = ev.seq
			}
			for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
				err := apply(ctx, evs[0].k, seqs)
				if err == nil {
					break
				}
				if errors.Is(err, fencedlock.ErrFenced) {
					w.rejected.Add(1)
				}
				if !sleepCtx(ctx, delay) {
					return
				}
			}
			evs = evs[n:]
			off += n
			w.processed[c].Add(int64(n))
		}
	}
}

// memTwin is the twins' applier on the memory backend, the same steps as
// Fenced.Apply: under the entity's lock, a read of its progress that, for
// the fenced lock, goes through the entity's gate and so raises it to the
// lease's token; skip what is applied; apply the rest (with the pause
// between the read and the write of each event); commit the run — for the
// fenced lock through the gate, which refuses a token below the highest it
// has admitted.
func (w *events) memTwin(holder string) (queueApplier, error) {
	locker, err := fencedlock.NewLocker(w.locks, &fencedlock.LockerConfig{Holder: holder, TTL: w.env.LeaseTTL,
		Wait: w.lockWait(), Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true}})
	if err != nil {
		return nil, err
	}
	fenced := w.approach == FencedLock
	return func(ctx context.Context, k int, seqs []int64) error {
		e := &w.mem[k]
		return locker.Do(ctx, w.keys[k], func(_ context.Context, lease fencedlock.Lease) error {
			var last, count int64
			read := func() error { e.mu.Lock(); last, count = e.last, e.count; e.mu.Unlock(); return nil }
			if fenced {
				if err := e.gate.Do(lease.Token, read); err != nil {
					return err
				}
			} else {
				_ = read()
			}
			var rows []appliedRow
			prev := last
			for _, seq := range seqs {
				if seq > last {
					w.pause(ctx)
					rows = append(rows, appliedRow{seq, prev})
					prev = seq
				}
			}
			if len(rows) == 0 {
				return nil
			}
			commit := func() error {
				e.mu.Lock()
				defer e.mu.Unlock()
				e.last, e.count, e.log = prev, count+int64(len(rows)), append(e.log, rows...)
				return nil
			}
			if fenced {
				return e.gate.Do(lease.Token, commit)
			}
			return commit()
		})
	}, nil
}
