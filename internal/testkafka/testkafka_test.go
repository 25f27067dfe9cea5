package testkafka

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func TestTopicName(t *testing.T) {
	legal := regexp.MustCompile(`^[A-Za-z0-9_-]{1,249}$`)
	a, b := topicName("TestX/sub test.1"), topicName("TestX/sub test.1")
	if a == b {
		t.Errorf("two names for one test are equal: %q", a)
	}
	if !strings.HasPrefix(a, "TestX-sub-test-1-") || !legal.MatchString(a) {
		t.Errorf("topicName = %q, want TestX-sub-test-1-<hex> with legal characters", a)
	}
	if long := topicName(strings.Repeat("x", 400)); !legal.MatchString(long) {
		t.Errorf("long name %q (%d chars) is not a legal topic name", long, len(long))
	}
}

// TestProduceConsume proves the broker works end to end: a fresh topic, one message written
// with acks=all and read back.
func TestProduceConsume(t *testing.T) {
	brokers := Brokers(t)
	topic := Topic(t, brokers, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	w := &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 10 * time.Millisecond,
	}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte("hello " + topic)}); err != nil {
		t.Fatalf("write: %v", err)
	}

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   brokers,
		Topic:     topic,
		Partition: 0,
		MaxWait:   100 * time.Millisecond,
	})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if string(m.Key) != "k" || string(m.Value) != "hello "+topic || m.Offset != 0 {
		t.Fatalf("read %q=%q at offset %d, want k=%q at 0", m.Key, m.Value, m.Offset, "hello "+topic)
	}
}

// next waits for g's next generation. ConsumerGroup.Next also returns the error of every failed
// join attempt while the group goes on retrying in the background — e.g.
// GROUP_COORDINATOR_NOT_AVAILABLE (15) while the broker creates __consumer_offsets for the first
// group, UNKNOWN_MEMBER_ID (25) after an eviction — so the caller keeps calling Next until it
// gets a generation, the group is closed, or ctx ends.
func next(ctx context.Context, t testing.TB, g *kafka.ConsumerGroup) (*kafka.Generation, error) {
	for {
		gen, err := g.Next(ctx)
		if err == nil || errors.Is(err, kafka.ErrGroupClosed) || ctx.Err() != nil {
			return gen, err
		}
		t.Logf("Next: %v (the group retries)", err)
	}
}

// newMember starts a consumer group member of group on topic; t.Cleanup closes it.
func newMember(t *testing.T, brokers []string, group, topic string, rebalanceTimeout time.Duration) *kafka.ConsumerGroup {
	t.Helper()
	g, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:      group,
		Brokers: brokers,
		Topics:  []string{topic},
		// A short heartbeat makes members notice a rebalance quickly (default 3 s).
		HeartbeatInterval: 250 * time.Millisecond,
		SessionTimeout:    6 * time.Second,
		RebalanceTimeout:  rebalanceTimeout,
		JoinGroupBackoff:  200 * time.Millisecond,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			t.Logf("kafka-go: "+msg, args...)
		}),
	})
	if err != nil {
		t.Fatalf("NewConsumerGroup: %v", err)
	}
	t.Cleanup(func() { _ = g.Close() }) // Close waits for its goroutines: no log after the test
	return g
}

// owned lists the partitions of topic assigned in gen, sorted.
func owned(gen *kafka.Generation, topic string) []int {
	var ids []int
	for _, a := range gen.Assignments[topic] {
		ids = append(ids, a.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestConsumerGroup proves what the project builds on: kafka-go's ConsumerGroup (classic
// protocol) against this broker — joins, generations, a rebalance when a second member joins
// and when it leaves, and committed offsets handed to the next owner.
func TestConsumerGroup(t *testing.T) {
	brokers := Brokers(t)
	topic := Topic(t, brokers, 4)
	group := "group-" + topic
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// 1. One member: it gets every partition.
	start := time.Now()
	a := newMember(t, brokers, group, topic, 10*time.Second)
	genA1, err := next(ctx, t, a)
	if err != nil {
		t.Fatalf("member A, first generation: %v", err)
	}
	if got := owned(genA1, topic); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("member A owns %v, want [0 1 2 3]", got)
	}
	t.Logf("A joined: generation %d, member %s, after %v", genA1.ID, genA1.MemberID, time.Since(start))

	// While generation 1 runs, B joins. A learns of the rebalance from its next heartbeat and
	// its generation's context ends; A cannot rejoin until this function returns, so the group
	// is still waiting for A (PreparingRebalance) when it commits with generation 1. The broker
	// ACCEPTS that commit (like a Java consumer committing in onPartitionsRevoked): only the
	// CompletingRebalance phase answers REBALANCE_IN_PROGRESS, and a newer generation
	// ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID (see TestConsumerGroupEviction).
	commitErr := make(chan error, 1)
	genA1.Start(func(ctx context.Context) {
		<-ctx.Done()
		commitErr <- genA1.CommitOffsets(map[string]map[int]int64{topic: {0: 1}})
	})

	// 2. Two members: each gets two partitions in one new generation.
	start = time.Now()
	b := newMember(t, brokers, group, topic, 10*time.Second)
	type result struct {
		gen *kafka.Generation
		err error
	}
	bNext := make(chan result, 1)
	go func() {
		gen, err := next(ctx, t, b)
		bNext <- result{gen, err}
	}()
	genA2, err := next(ctx, t, a)
	if err != nil {
		t.Fatalf("member A, second generation: %v", err)
	}
	rb := <-bNext
	if rb.err != nil {
		t.Fatalf("member B, first generation: %v", rb.err)
	}
	genB := rb.gen
	t.Logf("B joined, rebalance took %v: generation %d, A owns %v, B owns %v",
		time.Since(start), genA2.ID, owned(genA2, topic), owned(genB, topic))
	if err := <-commitErr; err != nil {
		t.Errorf("commit of generation %d while the group waits for its members: %v", genA1.ID, err)
	}
	if genA2.ID != genB.ID || genA2.ID <= genA1.ID {
		t.Errorf("generations: A %d then %d, B %d; want A's second = B's > A's first",
			genA1.ID, genA2.ID, genB.ID)
	}
	all := append(owned(genA2, topic), owned(genB, topic)...)
	slices.Sort(all)
	if !slices.Equal(all, []int{0, 1, 2, 3}) || len(owned(genA2, topic)) != 2 {
		t.Errorf("A owns %v, B owns %v: want two partitions each, together [0 1 2 3]",
			owned(genA2, topic), owned(genB, topic))
	}

	// 3. B leaves (Close sends LeaveGroup): A owns everything again in a newer generation.
	start = time.Now()
	if err := b.Close(); err != nil {
		t.Fatalf("close B: %v", err)
	}
	genA3, err := next(ctx, t, a)
	if err != nil {
		t.Fatalf("member A, third generation: %v", err)
	}
	t.Logf("B left, rebalance took %v: generation %d, A owns %v",
		time.Since(start), genA3.ID, owned(genA3, topic))
	if got := owned(genA3, topic); genA3.ID <= genA2.ID || !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("after B left: generation %d (previous %d), A owns %v; want newer, [0 1 2 3]",
			genA3.ID, genA2.ID, got)
	}

	// 4. The current generation can commit, and the next member of the group starts from the
	// committed offsets (Generation.Assignments carries them).
	if err := genA3.CommitOffsets(map[string]map[int]int64{topic: {2: 7}}); err != nil {
		t.Fatalf("commit in the current generation: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("close A: %v", err)
	}
	start = time.Now()
	genC, err := next(ctx, t, newMember(t, brokers, group, topic, 10*time.Second))
	if err != nil {
		t.Fatalf("member C, first generation: %v", err)
	}
	t.Logf("C joined the empty group after %v: generation %d", time.Since(start), genC.ID)
	want := map[int]int64{0: 1, 2: 7} // 0 from the commit in step 2, 2 from step 4
	for _, p := range genC.Assignments[topic] {
		if off, ok := want[p.ID]; ok && p.Offset != off {
			t.Errorf("member C starts partition %d at offset %d, want the committed %d", p.ID, p.Offset, off)
		}
	}
}

// TestConsumerGroupEviction shows the hazard the project exists for: a member whose generation
// ended but whose work does not stop within RebalanceTimeout is evicted, and the other member
// gets its partitions while the old work still runs. The broker then rejects the old
// generation's offset commit — that protects Kafka offsets only, not any other write.
func TestConsumerGroupEviction(t *testing.T) {
	brokers := Brokers(t)
	topic := Topic(t, brokers, 4)
	group := "group-" + topic
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const rebalanceTimeout = 2 * time.Second

	a := newMember(t, brokers, group, topic, rebalanceTimeout)
	genA1, err := next(ctx, t, a)
	if err != nil {
		t.Fatalf("member A, first generation: %v", err)
	}
	// A's work ignores the end of its generation until B owns the partitions.
	bOwns := make(chan struct{})
	commitErr := make(chan error, 1)
	genA1.Start(func(ctx context.Context) {
		<-ctx.Done()
		<-bOwns
		commitErr <- genA1.CommitOffsets(map[string]map[int]int64{topic: {0: 1}})
	})

	start := time.Now()
	b := newMember(t, brokers, group, topic, rebalanceTimeout)
	genB, err := next(ctx, t, b)
	if err != nil {
		t.Fatalf("member B, first generation: %v", err)
	}
	t.Logf("B got generation %d owning %v after %v, while A's generation %d work still runs",
		genB.ID, owned(genB, topic), time.Since(start), genA1.ID)
	if got := owned(genB, topic); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("B owns %v, want [0 1 2 3] (A evicted)", got)
	}
	close(bOwns)
	err = <-commitErr
	t.Logf("A's commit with generation %d after eviction: %v", genA1.ID, err)
	if !errors.Is(err, kafka.UnknownMemberId) && !errors.Is(err, kafka.IllegalGeneration) {
		t.Errorf("commit of the evicted generation: err = %v, want %v or %v",
			err, kafka.UnknownMemberId, kafka.IllegalGeneration)
	}

	// A rejoins (as a new member) once its work returns; the two share the partitions again.
	start = time.Now()
	genA2, err := next(ctx, t, a)
	if err != nil {
		t.Fatalf("member A, after eviction: %v", err)
	}
	t.Logf("A rejoined after %v: generation %d owning %v", time.Since(start), genA2.ID, owned(genA2, topic))
	if len(owned(genA2, topic)) != 2 {
		t.Errorf("A owns %v after rejoining, want two partitions", owned(genA2, topic))
	}
}
