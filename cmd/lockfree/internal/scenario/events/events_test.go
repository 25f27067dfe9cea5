package events

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// A consumer's poll reaches both entities it competes for, however far
// behind the one it takes first is: the entity of a stopped consumer is
// taken over even while the taker's own stream is busy.
func TestEventsPollReachesEveryEntity(t *testing.T) {
	db := testdb.New(t, (events{}).Migrations()...)
	ctx := context.Background()
	sizes := engine.Sizes{Keys: 1, Clients: 8}
	if err := (events{}).Setup(ctx, db.Pool, sizes); err != nil {
		t.Fatal(err)
	}
	// Worker 1 takes its own entity first (md5 order), then worker 0's.
	if _, err := db.Pool.Exec(ctx, sqlEventsProduce, "entity-1-0", 1, "1/1", 3*pagePerEntity); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, sqlEventsProduce, "entity-0-0", 1, "0/1", 1); err != nil {
		t.Fatal(err)
	}
	c := &consumer{env: &engine.Env{Client: 1, Params: engine.Params{Sizes: sizes}, DB: db.Pool}}
	evs, full, err := c.poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, e := range evs {
		per[e.entity]++
	}
	if per["entity-0-0"] != 1 || per["entity-1-0"] == 0 || !full {
		t.Fatalf("poll = %v per entity (full %v), want both entities, worker 0's one event among them, and a full page", per, full)
	}
}

// Entity i of all lands on partition i mod the partitions, whatever its
// name hashes to, so that every member of the group has work.
func TestSpreadKeyPlacesEveryEntity(t *testing.T) {
	const partitions = 8
	for c := range 16 {
		key := spreadKey(entityName(c, 0), c, partitions)
		if got := kafkawriter.PartitionFor(key, partitions); got != c%partitions {
			t.Errorf("entity %d: key %q goes to partition %d, want %d", c, key, got, c%partitions)
		}
		if e := lockEntity("events/12:lockfree-x/3/" + key); e != entityName(c, 0) {
			t.Errorf("lock of key %q names entity %q, want %q", key, e, entityName(c, 0))
		}
	}
}

// An event's message value decodes to the event, and a value that is not
// one is an error, not a zero event applied.
func TestEventMessageRoundTrip(t *testing.T) {
	e := pendingEvent{entity: "entity-3-1", seq: 42, by: "3/17"}
	got, err := decodeEvent(encodeEvent(e))
	if err != nil || got != e {
		t.Fatalf("decodeEvent(encodeEvent(%+v)) = %+v, %v", e, got, err)
	}
	for _, bad := range []string{"", "entity-3-1 42", "entity-3-1 x 3/17", "a b c d"} {
		if _, err := decodeEvent([]byte(bad)); err == nil {
			t.Errorf("decodeEvent(%q) = nil error", bad)
		}
	}
}

// The unfenced twins' member applies a run of an entity's messages in the
// round trips docs/singlewriter.md and scripts/results.sh count — under the
// lock, a plain read, then BEGIN, the events and the progress write in one
// batch, COMMIT — skips what the progress says is applied, and a run found
// applied costs the read alone.
func TestGroupConsumerApply(t *testing.T) {
	db := testdb.New(t, (events{}).Migrations()...)
	ctx := context.Background()
	if err := (events{}).Setup(ctx, db.Pool, engine.Sizes{Keys: 1, Clients: 1}); err != nil {
		t.Fatal(err)
	}
	pc, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns, pc.MinConns = 1, 0 // one connection: its statements prepared once
	tr := &engine.Tracer{}
	pc.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	g := &groupConsumer{env: &engine.Env{DB: pool}, topic: "t", holder: "worker-0", point: "p"}
	const name = "1:t/0/entity-0-0"
	base := int64(0) // events base+1 to base+10: none hostile (hostileKind)
	for s := int64(1); s <= base+10; s++ {
		if hostileKind("entity-0-0", s) != wellBehaved {
			base = s
		}
	}
	run := func(from, to int64) []kafka.Message { // offsets from..to, event seq = base + offset + 1
		var out []kafka.Message
		for o := from; o <= to; o++ {
			out = append(out, kafka.Message{Topic: "t", Partition: 0, Offset: o, Key: []byte("entity-0-0"),
				Value: encodeEvent(pendingEvent{entity: "entity-0-0", seq: base + o + 1, by: "0/1"})})
		}
		return out
	}
	apply := func(msgs []kafka.Message) engine.Counts {
		t.Helper()
		before := tr.Counts()
		if err := g.apply(ctx, name, 0, msgs); err != nil {
			t.Fatal(err)
		}
		after := tr.Counts()
		return engine.Counts{RoundTrips: after.RoundTrips - before.RoundTrips, Statements: after.Statements - before.Statements}
	}
	apply(run(0, 4)) // prepares the statements on the connection
	if got := apply(run(3, 9)); got.RoundTrips != 4 || got.Statements != 9 {
		t.Errorf("a run of 5 new events after 2 applied: %d round trips, %d statements; want 4 (read, BEGIN, batch, COMMIT) and 9", got.RoundTrips, got.Statements)
	}
	if got := apply(run(5, 9)); got.RoundTrips != 1 || got.Statements != 1 {
		t.Errorf("a run found applied: %d round trips, %d statements; want the read alone", got.RoundTrips, got.Statements)
	}
	rows, err := pool.Query(ctx, sqlEventsApplied)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	var entity, by string
	var seq, prev int64
	if _, err := pgx.ForEachRow(rows, []any{&entity, &seq, &prev, &by}, func() error {
		seqs = append(seqs, seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 10 || seqs[0] != base+1 || seqs[9] != base+10 {
		t.Errorf("applied %v, want events 1 to 10 once each", seqs)
	}
	var last int64
	if err := pool.QueryRow(ctx, sqlEventsProgress, name).Scan(&last); err != nil || last != 9 {
		t.Errorf("progress = %d, %v; want offset 9", last, err)
	}
}

// backlogProducer is a producer of worker 0 of a run of clients workers
// whose entity k has acked[k] events acknowledged, and whose consumers
// apply the first entity's only after its polls-th poll: it records the
// polls and the delays between them.
func backlogProducer(clients int, acked []int64, polls int) (*kafkaProducer, *[]string, *[]time.Duration) {
	var polled []string
	var delays []time.Duration
	p := &kafkaProducer{producer: &producer{env: &engine.Env{Params: engine.Params{Sizes: engine.Sizes{Clients: clients, Keys: len(acked)}}}}, acked: acked}
	p.applied = func(_ context.Context, entity string) (int64, error) {
		polled = append(polled, entity)
		if len(polled) < polls {
			return 0, nil
		}
		return acked[len(acked)-1], nil
	}
	p.pause = func(_ context.Context, d time.Duration) bool {
		delays = append(delays, d)
		return true
	}
	return p, &polled, &delays
}

// A producer waiting for its consumers polls their progress less and less
// often, down to once a millisecond per worker of the run: a fleet of 64
// that polled every 2 ms sent the server 32 000 queries a second, on the
// cores its consumers needed, and they applied nothing for a minute.
func TestBacklogWaitBacksOff(t *testing.T) {
	p, _, delays := backlogProducer(64, []int64{kafkaBacklog}, 12)
	if !p.wait(context.Background(), 0) {
		t.Fatal("wait gave up")
	}
	var want []time.Duration
	for _, ms := range []time.Duration{1, 2, 4, 8, 16, 32, 64, 64, 64, 64, 64} {
		want = append(want, ms*time.Millisecond)
	}
	if !slices.Equal(*delays, want) {
		t.Fatalf("delays %v, want %v", *delays, want)
	}
}

// A worker drains only the entities it was acknowledged events of: one
// poll each of 10 000 entities never sent to kept a fleet of 64 busy past
// its bound.
func TestDrainPollsTheEntitiesSentTo(t *testing.T) {
	acked := make([]int64, 10000)
	acked[len(acked)-1] = 5
	p, polled, _ := backlogProducer(64, acked, 3)
	if err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, e := range *polled {
		if e != entityName(0, len(acked)-1) {
			t.Fatalf("polled %d times, %s among them, which nothing was sent to", len(*polled), e)
		}
	}
}

// The consumer group's timing grows with the fleet: 2 s sessions and
// rebalances up to 8 members, 2 s more each for every 8 more, so that a
// member of 64 on a loaded machine heartbeats and rejoins in time. The
// lease that protects each approach on Kafka — how long a fault waits for
// a takeover — grows with it.
func TestGroupTimingGrowsWithTheFleet(t *testing.T) {
	for _, tc := range []struct {
		clients int
		want    engine.GroupTiming
	}{
		{1, engine.GroupTiming{Session: 2 * time.Second, Rebalance: 2 * time.Second, Heartbeat: 100 * time.Millisecond}},
		{8, engine.GroupTiming{Session: 2 * time.Second, Rebalance: 2 * time.Second, Heartbeat: 100 * time.Millisecond}},
		{9, engine.GroupTiming{Session: 4 * time.Second, Rebalance: 4 * time.Second, Heartbeat: 200 * time.Millisecond}},
		{64, engine.GroupTiming{Session: 16 * time.Second, Rebalance: 16 * time.Second, Heartbeat: 800 * time.Millisecond}},
	} {
		if got := engine.KafkaGroupTiming(tc.clients); got != tc.want {
			t.Errorf("%d clients: %+v, want %+v", tc.clients, got, tc.want)
		}
		for _, d := range engine.Approaches(events{}.Name()) {
			if _, ok := d.(engine.KafkaUser); !ok {
				continue
			}
			lease := d.Protection(engine.Params{Sizes: engine.Sizes{Clients: tc.clients, Keys: 1}}).Lease
			if lease < tc.want.Lease() {
				t.Errorf("%d clients: %s is protected for %v, less than its group's session and rebalance", tc.clients, d.Approach(), lease)
			}
		}
	}
}

// Drain leaves an entity whose consumers apply nothing of it, once they
// have applied nothing for its stall bound, to the check (which reports its
// events missing), and returns, so that the worker reports its counts; an
// entity they keep applying it waits for.
func TestDrainLeavesAStalledEntity(t *testing.T) {
	p, polled, _ := backlogProducer(4, []int64{50}, 1<<30) // never applied past 0
	p.stall = 30 * time.Millisecond
	p.pause = func(ctx context.Context, d time.Duration) bool { return engine.Sleep(ctx, time.Millisecond) }
	if err := p.Drain(context.Background()); err != nil {
		t.Fatalf("Drain of a stalled entity: %v, want nil once stalled", err)
	}
	if len(*polled) < 2 {
		t.Fatalf("polled %d times, want a wait of the stall bound", len(*polled))
	}
	moving := &kafkaProducer{producer: p.producer, acked: []int64{50}, stall: 30 * time.Millisecond, pause: p.pause}
	var last int64
	moving.applied = func(context.Context, string) (int64, error) {
		time.Sleep(10 * time.Millisecond)
		last++
		return last, nil
	}
	if err := moving.Drain(context.Background()); err != nil || last < 50 {
		t.Fatalf("Drain of an entity applied one event per poll: %v, applied %d; want all 50", err, last)
	}
}
