package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/partition"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// RelayConfig configures a Relay. A nil *RelayConfig means the defaults.
type RelayConfig struct {
	// Member configures the relay's membership of the relays' fleet (a
	// partition.Member): Name, unique among live relays; TTL, after which
	// a relay that stopped heartbeating loses its partitions; Interval,
	// Margin, DrainTimeout. Ring.Partitions must be 0 or the store's
	// Partitions; Logger, MeterProvider and TracerProvider default to the
	// relay's. Defaults to partition.Config's defaults (a UUIDv7 name, TTL
	// 10s).
	Member *partition.Config
	// BatchSize is the most events one publish of a partition carries.
	// At most 10,000. Defaults to 100.
	BatchSize int
	// MaxBatchBytes bounds one publish of a partition (keys, payloads,
	// headers, as MaxEventBytes counts them, plus each record's overhead),
	// so that each topic partition's share fits in one produce request the
	// topic accepts; a larger event goes alone. Start refuses a topic whose
	// max.message.bytes is below it. Defaults to 1,000,000.
	MaxBatchBytes int
	// PollInterval is how often the relay looks for events in the
	// partitions it owns when it has found none. Defaults to 100ms.
	PollInterval time.Duration
	// RetryBackoff is the delay after a failed publish or delete, doubling
	// up to MaxRetryBackoff while failures go on. Defaults to 100ms.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the delay; it must not be below RetryBackoff.
	// Defaults to 5s, or RetryBackoff when that is longer.
	MaxRetryBackoff time.Duration
	// PublishTimeout bounds one produce request, the topic's metadata and
	// configuration requests, and the delete that follows a publish. A
	// produce request that times out may have been written: the batch is
	// published again. Defaults to 10s.
	PublishTimeout time.Duration
	// Transport connects to the brokers (TLS, SASL); the caller then owns
	// it. Defaults to a transport of the relay's own, whose connections
	// Stop releases.
	Transport kafka.RoundTripper
	// Logger receives diagnostics. Defaults to none.
	Logger *slog.Logger
	// MeterProvider receives the relay's metrics (docs/outbox.md,
	// "Metrics"). Defaults to none: nothing is recorded.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span per batch, with its partition and
	// epoch. Defaults to none.
	TracerProvider trace.TracerProvider
}

// Defaults and limits of RelayConfig.
const (
	DefaultBatchSize     = 100
	MaxBatchSize         = 10000
	DefaultMaxBatchBytes = 1_000_000
)

func (c *RelayConfig) withDefaults() RelayConfig {
	var d RelayConfig
	if c != nil {
		d = *c
	}
	if d.BatchSize == 0 {
		d.BatchSize = DefaultBatchSize
	}
	if d.MaxBatchBytes == 0 {
		d.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if d.PollInterval == 0 {
		d.PollInterval = 100 * time.Millisecond
	}
	if d.RetryBackoff == 0 {
		d.RetryBackoff = 100 * time.Millisecond
	}
	if d.MaxRetryBackoff == 0 {
		d.MaxRetryBackoff = max(5*time.Second, d.RetryBackoff)
	}
	if d.PublishTimeout == 0 {
		d.PublishTimeout = 10 * time.Second
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return d
}

func (c RelayConfig) validate() error {
	switch {
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return fmt.Errorf("%w: batch size %d outside [1, %d]", ErrInvalid, c.BatchSize, MaxBatchSize)
	case c.MaxBatchBytes < 1:
		return fmt.Errorf("%w: max batch bytes %d", ErrInvalid, c.MaxBatchBytes)
	case c.PollInterval <= 0, c.RetryBackoff <= 0, c.PublishTimeout <= 0:
		return fmt.Errorf("%w: poll interval %v, retry backoff %v and publish timeout %v must be positive",
			ErrInvalid, c.PollInterval, c.RetryBackoff, c.PublishTimeout)
	case c.MaxRetryBackoff < c.RetryBackoff:
		return fmt.Errorf("%w: max retry backoff %v below retry backoff %v", ErrInvalid, c.MaxRetryBackoff, c.RetryBackoff)
	}
	return nil
}

// member returns the configuration of the relay's member of a fleet over
// partitions: the relay's with the ring's partition count.
func (c RelayConfig) member(partitions int, wake func()) (partition.Config, error) {
	var m partition.Config
	if c.Member != nil {
		m = *c.Member
	}
	var ring partition.RingConfig
	if m.Ring != nil {
		ring = *m.Ring
	}
	if ring.Partitions != 0 && ring.Partitions != partitions {
		return m, fmt.Errorf("%w: the relays' ring has %d partitions, the outbox %d", ErrInvalid, ring.Partitions, partitions)
	}
	ring.Partitions = partitions
	m.Ring = &ring
	if m.Logger == nil {
		m.Logger = c.Logger
	}
	if m.MeterProvider == nil {
		m.MeterProvider = c.MeterProvider
	}
	if m.TracerProvider == nil {
		m.TracerProvider = c.TracerProvider
	}
	user := m.OnEvent
	m.OnEvent = func(e partition.Event) {
		if e.Kind == partition.Started {
			wake() // publish a partition as soon as it is claimed
		}
		if user != nil {
			user(e)
		}
	}
	return m, nil
}

// RelayStats counts what a relay did since it was created.
type RelayStats struct {
	Published int64 // events published and deleted from the outbox
	Batches   int64 // batches published and deleted
	Failed    int64 // batches whose publish or delete failed, published again
	Uncertain int64 // of Failed, publishes that may have been written (ErrUncertain): published again, maybe twice
	Fenced    int64 // batches whose delete a newer owner refused (ErrStaleEpoch): published, maybe twice
	Moved     int64 // batches cut short when the relay lost their partition (partition.ErrMoving): the new owner publishes them, maybe twice
}

// Relay publishes an outbox's events to a Kafka topic, as one member of a
// fleet of relays that share the outbox's partitions (a partition.Member in
// the store's partition tables). For each partition it owns, it reads the
// oldest events (up to BatchSize), publishes them — each topic partition's
// share in one produce request, whole or not at all, with the event's ID
// and sequence in headers — then deletes them with a statement fenced by
// its partition epoch. A publish that fails is retried with the same
// events; so is one whose outcome is unknown (kafkawriter.ErrUncertain: the
// connection broke or the request timed out after it went out), which may
// not have been written. Kafka may then hold copies, which the inbox drops.
// The delete runs even if the partition was taken away during the publish;
// refused by a newer owner (ErrStaleEpoch: this relay paused past its
// lease), it ends the relay's work on the partition.
//
// Create it with NewRelay, Start it, Stop it; the zero Relay is not usable.
// Its methods are safe for concurrent use.
type Relay struct {
	store  Store
	topic  string
	cfg    RelayConfig
	member *partition.Member
	pub    *publisher
	keys   []string // a key of each partition, for Member.Do
	need   int      // the largest record batch the relay may send
	tel    *relayTelemetry

	life    sync.Mutex // held by Start and Stop
	state   int        // idle, running or stopped
	stop    context.CancelFunc
	abort   context.CancelFunc
	loop    chan struct{} // closed when the loop returned
	stopped chan struct{}
	wake    chan struct{}

	mu      sync.Mutex
	working map[int]bool // partitions with a worker
	workers sync.WaitGroup

	stats struct{ published, batches, failed, uncertain, fenced, moved atomic.Int64 }
}

const (
	idle = iota
	running
	stopped
)

// NewRelay returns a relay of store's events to topic on the cluster at
// brokers. store must be on a pool (not a transaction: the relay runs its
// own statements). A nil cfg means the defaults; a nil store, no brokers
// or an empty one, a topic name Kafka refuses (1–249 characters of
// [a-zA-Z0-9._-], other than "." and "..") or a bad cfg give an error
// matching ErrInvalid. It does no I/O: Start checks the topic and joins
// the fleet.
func NewRelay(store Store, brokers []string, topic string, cfg *RelayConfig) (*Relay, error) {
	if isNil(store) {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	if p, ok := store.(*Postgres); ok && inTransaction(p.db) {
		return nil, fmt.Errorf("%w: a relay needs a store on a pool, not on a transaction", ErrInvalid)
	}
	if len(brokers) == 0 || slices.Contains(brokers, "") {
		return nil, fmt.Errorf("%w: a relay needs brokers, none empty", ErrInvalid)
	}
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	r := &Relay{store: store, topic: topic, cfg: c, keys: partitionKeys(store.Partitions()),
		need:    need(store.config().maxEventBytes, c.MaxBatchBytes),
		stopped: make(chan struct{}), wake: make(chan struct{}, 1), working: map[int]bool{}}
	mc, err := c.member(store.Partitions(), r.poke)
	if err != nil {
		return nil, err
	}
	if r.member, err = partition.NewMember(store.membership(), &mc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	r.pub = newPublisher(brokers, topic, c.Transport, c.PublishTimeout)
	r.tel = newRelayTelemetry(c, topic)
	return r, nil
}

// partitionKeys returns a key of each of the n partitions: Member.Do runs
// a function on the partition of a key.
func partitionKeys(n int) []string {
	ring, _ := partition.NewRing(nil, &partition.RingConfig{Partitions: n})
	keys := make([]string, n)
	for i, left := 0, n; left > 0; i++ {
		k := "outbox-" + strconv.Itoa(i)
		if p := ring.Partition(k); keys[p] == "" {
			keys[p] = k
			left--
		}
	}
	return keys
}

// Name returns the relay's name in its fleet.
func (r *Relay) Name() string { return r.member.Name() }

// Owned returns the epochs of the partitions the relay owns now.
func (r *Relay) Owned() []partition.Epoch { return r.member.Owned() }

// Stats returns the relay's counters. It is safe to call at any time.
func (r *Relay) Stats() RelayStats {
	return RelayStats{Published: r.stats.published.Load(), Batches: r.stats.batches.Load(),
		Failed: r.stats.failed.Load(), Uncertain: r.stats.uncertain.Load(), Fenced: r.stats.fenced.Load(),
		Moved: r.stats.moved.Load()}
}

// Start checks the topic, joins the relays' fleet, claims the partitions
// the ring places on this relay, and returns; the relay then publishes
// until Stop. It fails when an event sits in a partition the store's
// Partitions does not cover (the outbox was written with more partitions:
// ErrInvalid), when the topic does not exist (an error matching
// kafka.UnknownTopicOrPartition), when its max.message.bytes is below the
// largest record batch the relay may send — an event of the store's
// MaxEventBytes, or MaxBatchBytes of events (ErrInvalid; the check is
// skipped, with a warning, if the brokers refuse to describe the topic) —,
// when the brokers cannot be reached, when it cannot join
// (partition.Member.Start's errors), or when ctx ends first. ctx
// bounds Start itself; the relay's background work keeps ctx's values but
// not its cancellation. Start on a running relay returns nil; on a stopped
// one, ErrStopped.
func (r *Relay) Start(ctx context.Context) error {
	r.life.Lock()
	defer r.life.Unlock()
	switch r.state {
	case running:
		return nil
	case stopped:
		return ErrStopped
	}
	h, err := r.store.highest(ctx)
	if err != nil {
		return err
	}
	if h >= r.store.Partitions() {
		return fmt.Errorf("%w: an event sits in partition %d, and the outbox has %d partitions: it was written with more", ErrInvalid, h, r.store.Partitions())
	}
	skipped, err := r.pub.check(ctx, r.need)
	if err != nil {
		r.pub.close()
		return err
	}
	if skipped != nil {
		r.cfg.Logger.Warn("outbox: cannot read the topic's max.message.bytes; events it refuses would stop their partition", telemetry.Err(skipped))
	}
	if err := r.member.Start(ctx); err != nil {
		r.pub.close()
		return fmt.Errorf("outbox: start relay %s: %w", r.member.Name(), err)
	}
	stopping, stop := context.WithCancel(context.WithoutCancel(ctx))
	work, abort := context.WithCancel(context.WithoutCancel(ctx))
	r.stop, r.abort, r.loop, r.state = stop, abort, make(chan struct{}), running
	go func() {
		defer close(r.loop)
		r.run(stopping, work)
	}()
	return nil
}

// Stop stops taking new batches, lets the batches in flight finish (or be
// fenced), hands the relay's partitions off and leaves the fleet
// (partition.Member.Stop), and releases the relay's connections. If ctx
// ends first, it cancels what is in flight (a batch cut short is published
// again by the next owner) and returns ctx's cause, the rest finishing in
// the background. A relay never started is stopped at once. Stop may be
// called more than once and concurrently.
func (r *Relay) Stop(ctx context.Context) error {
	r.life.Lock()
	prev := r.state
	r.state = stopped
	r.life.Unlock()
	switch prev {
	case idle:
		r.member.Stop(ctx)
		r.pub.close()
		r.once(func() { close(r.stopped) })
		return nil
	case stopped:
		select {
		case <-r.stopped:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	r.stop()
	done := make(chan error, 1)
	go func() {
		<-r.loop
		err := r.member.Stop(ctx)
		r.workers.Wait()
		r.abort()
		r.pub.close()
		close(r.stopped)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		r.abort()
		return context.Cause(ctx)
	}
}

// once runs f under the lifecycle lock.
func (r *Relay) once(f func()) {
	r.life.Lock()
	defer r.life.Unlock()
	f()
}

// Stopped returns a channel closed once the relay has stopped.
func (r *Relay) Stopped() <-chan struct{} { return r.stopped }

// poke wakes the loop.
func (r *Relay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// run starts a worker for each owned partition that holds events, every
// PollInterval or when woken, until stopping ends.
func (r *Relay) run(stopping, work context.Context) {
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		r.dispatch(stopping, work)
		select {
		case <-stopping.Done():
			return
		case <-t.C:
		case <-r.wake:
		}
	}
}

func (r *Relay) dispatch(stopping, work context.Context) {
	var idle []int
	r.mu.Lock()
	for _, e := range r.member.Owned() {
		if !r.working[e.Partition] {
			idle = append(idle, e.Partition)
		}
	}
	r.mu.Unlock()
	if len(idle) == 0 {
		return
	}
	busy, err := r.store.busy(stopping, idle)
	if err != nil {
		if stopping.Err() == nil {
			r.cfg.Logger.Warn("outbox: looking for events", telemetry.Err(err))
		}
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range busy {
		if r.working[p] || stopping.Err() != nil {
			continue
		}
		r.working[p] = true
		r.workers.Add(1)
		go r.worker(stopping, work, p)
	}
}

// worker publishes partition p's events, batch after batch on the
// partition's executor (Member.Do), until none is left, the relay no longer
// owns p, or stopping ends. A batch in flight runs under work.
func (r *Relay) worker(stopping, work context.Context, p int) {
	defer func() {
		r.mu.Lock()
		delete(r.working, p)
		r.mu.Unlock()
		r.workers.Done()
	}()
	log := r.cfg.Logger.With(telemetry.Topic, r.topic, telemetry.Partition, p)
	backoff := r.cfg.RetryBackoff
	for stopping.Err() == nil {
		var more, ran bool
		err := r.member.Do(work, r.keys[p], func(ctx context.Context, e partition.Epoch) error {
			var err error
			ran = true
			more, err = r.batch(ctx, e)
			return err
		})
		switch {
		case err == nil && more:
			backoff = r.cfg.RetryBackoff
			continue
		case err == nil:
			return
		case errors.Is(err, ErrStaleEpoch):
			r.stats.fenced.Add(1)
			r.tel.fenced.Add(work, 1, r.tel.topic.Add()...)
			log.Info("outbox: partition claimed by a newer relay; giving it up", telemetry.Err(err))
			return
		case errors.Is(err, partition.ErrMoving) && ran:
			// The member cut the batch short: the relay lost the partition
			// (its lease lapsed, a handoff) with the batch in flight.
			r.stats.moved.Add(1)
			log.Info("outbox: partition lost with a batch in flight; giving it up", telemetry.Err(err))
			return
		case errors.Is(err, partition.ErrNotOwner), errors.Is(err, partition.ErrMoving), errors.Is(err, partition.ErrStopped),
			work.Err() != nil:
			return
		}
		r.stats.failed.Add(1)
		var pe *publishError
		switch {
		case errors.As(err, &pe) && pe.uncertain:
			r.stats.uncertain.Add(1)
			r.tel.failures.Add(work, 1, r.tel.uncertainFail.Add()...)
		case pe != nil:
			r.tel.failures.Add(work, 1, r.tel.refusedFail.Add()...)
		default:
			r.tel.failures.Add(work, 1, r.tel.dbFail.Add()...)
		}
		log.Warn("outbox: batch failed; retrying", telemetry.Err(err), "backoff", backoff)
		if !sleep(stopping, backoff) {
			return
		}
		backoff = min(2*backoff, r.cfg.MaxRetryBackoff)
	}
}

// batch publishes the oldest events of e's partition and deletes them,
// fenced by e. It reports whether more may be waiting.
func (r *Relay) batch(ctx context.Context, e partition.Epoch) (more bool, err error) {
	ctx, span := r.tel.tracer.Start(ctx, "outbox.publish")
	defer func() {
		if errors.Is(err, ErrStaleEpoch) {
			span.End(nil) // a refusal is an outcome, not a failure
		} else {
			span.End(err)
		}
	}()
	recs, err := r.store.pending(ctx, e.Partition, r.cfg.BatchSize)
	if err != nil || len(recs) == 0 {
		return false, err
	}
	more = len(recs) == r.cfg.BatchSize
	if n := fit(recs, r.cfg.MaxBatchBytes); n < len(recs) {
		recs, more = recs[:n], true
	}
	if span.Recording() {
		span.Set(attribute.Int(telemetry.Partition, e.Partition), attribute.Int64(telemetry.Epoch, e.Token),
			attribute.Int(telemetry.Count, len(recs)))
	}
	if failpoint.Mutant("outbox.relay.order") {
		slices.Reverse(recs)
	}
	// Between the read and the publish: where a pause lets another relay
	// take the partition over and publish the same events first.
	failpoint.Inject(ctx, "outbox.relay.before-publish")
	if err := r.pub.publish(ctx, recs); err != nil {
		// Not acknowledged: the batch stays, and is published again,
		// even when it may have been written (ErrUncertain): it may not
		// have been, and the inbox drops a copy.
		if !errors.Is(err, kafkawriter.ErrUncertain) || !failpoint.Mutant("outbox.relay.uncertain") {
			return false, err
		}
	}
	// Between the publish and the delete: a crash here leaves the events
	// to be published again.
	failpoint.Inject(ctx, "outbox.relay.before-mark")
	// The delete runs even if the partition was taken away meanwhile
	// (ctx cancelled): it is fenced by the epoch, and if the epoch is
	// still current it spares the next owner a second publish.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PublishTimeout)
	defer cancel()
	if err := r.store.published(mctx, e, recs); err != nil {
		return false, err
	}
	r.stats.published.Add(int64(len(recs)))
	r.stats.batches.Add(1)
	oldest := recs[0].Created
	for _, rec := range recs {
		if rec.Created.Before(oldest) {
			oldest = rec.Created
		}
	}
	r.tel.done(ctx, len(recs), time.Since(oldest).Seconds())
	return more, nil
}

// fit returns how many of recs, from the first, fit in maxBytes; at least
// one.
func fit(recs []Record, maxBytes int) int {
	total := 0
	for i, rec := range recs {
		if total += size(rec); total > maxBytes && i > 0 {
			return i
		}
	}
	return len(recs)
}

// validTopic checks a topic name as Kafka does: 1–249 characters of
// ASCII letters, digits, '.', '_' and '-', other than "." and "..".
func validTopic(t string) error {
	ok := len(t) >= 1 && len(t) <= 249 && t != "." && t != ".."
	for i := 0; ok && i < len(t); i++ {
		c := t[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: topic %s: Kafka takes 1–249 characters of [a-zA-Z0-9._-], other than . and ..", ErrInvalid, short.Quote(t))
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
