package outbox_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/internal/testkafka"
	"github.com/lockfree-go/lockfree/outbox"
	"github.com/lockfree-go/lockfree/partition"
)

// Two relays split the partitions and publish every event, each entity's
// in the order written; a deduplicating consumer applies each once, in
// order.
func TestRelaysPublishEachEventInOrder(t *testing.T) {
	t.Parallel()
	if err := checkRelaysPublishInOrder(t); err != nil {
		t.Fatal(err)
	}
}

func checkRelaysPublishInOrder(t *testing.T) error {
	e := newEnv(t, 4, 3)
	e.write(t, 8, 5)
	tel := telemetrytest.New(t)
	cfgA := relayConfig("a")
	cfgA.MeterProvider, cfgA.TracerProvider = tel.Meters, tel.Tracers
	a := e.relay(t, ctx, cfgA)
	b := e.relay(t, ctx, relayConfig("b"))
	waitFor(t, 180*time.Second, func() bool { return len(owned(a)) > 0 && len(owned(b)) > 0 })
	e.write(t, 8, 5)
	e.waitPublished(t)
	e.perEntityOrder(t)
	// A relay counts a batch just after its delete commits: wait for the
	// counts, as TestRelayStopHandsOff does.
	waitFor(t, 10*time.Second, func() bool { return a.Stats().Published+b.Stats().Published >= 80 })
	sa, sb := a.Stats(), b.Stats()
	if sa.Published+sb.Published < 80 {
		t.Fatalf("the relays published %d + %d events, want at least 80", sa.Published, sb.Published)
	}
	waitFor(t, 10*time.Second, func() bool { return tel.Sum(t, "lockfree.outbox.events.published") == a.Stats().Published })
	if got, want := tel.Sum(t, "lockfree.outbox.batches"), a.Stats().Batches; got != want {
		t.Errorf("batches metric %d, stats %d", got, want)
	}
	if n, _ := tel.Count(t, "lockfree.outbox.delay"); int64(n) != a.Stats().Batches {
		t.Errorf("%d delays recorded for %d batches", n, a.Stats().Batches)
	}
	t.Logf("a %+v owns %v; b %+v owns %v", sa, owned(a), sb, owned(b))
	return e.consume(t, "dedupe", true).err()
}

// A relay that stops hands its partitions to the others, which publish
// what it left.
func TestRelayStopHandsOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4, 2)
	a := e.relay(t, ctx, relayConfig("a"))
	b := e.relay(t, ctx, relayConfig("b"))
	waitFor(t, 180*time.Second, func() bool { return len(owned(a)) > 0 && len(owned(b)) > 0 })
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Stopped():
	default:
		t.Fatal("Stopped open after Stop returned")
	}
	if err := a.Start(ctx); !errors.Is(err, outbox.ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
	waitFor(t, 180*time.Second, func() bool { return len(owned(b)) == 4 })
	e.write(t, 4, 3)
	e.waitPublished(t)
	// b counts a batch just after its delete commits: wait for the count.
	waitFor(t, 10*time.Second, func() bool { return b.Stats().Published >= 12 })
	if s := b.Stats(); s.Published != 12 {
		t.Fatalf("b published %d events, want 12", s.Published)
	}
}

func TestRelayConfigValidation(t *testing.T) {
	t.Parallel()
	store, err := outbox.NewMemory(&outbox.MemoryConfig{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	brokers := []string{"127.0.0.1:1"}
	for name, cfg := range map[string]*outbox.RelayConfig{
		"negative batch size":       {BatchSize: -1},
		"batch size above max":      {BatchSize: outbox.MaxBatchSize + 1},
		"batch bytes":               {MaxBatchBytes: -1},
		"poll interval":             {PollInterval: -time.Second},
		"publish timeout":           {PublishTimeout: -time.Second},
		"max backoff below backoff": {RetryBackoff: time.Second, MaxRetryBackoff: time.Millisecond},
		"ring of another size":      {Member: &partition.Config{Ring: &partition.RingConfig{Partitions: 8}}},
		"member TTL":                {Member: &partition.Config{TTL: -time.Second}},
	} {
		if _, err := outbox.NewRelay(store, brokers, "t", cfg); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	for name, err := range map[string]error{
		"nil store":  second(outbox.NewRelay(nil, brokers, "t", nil)),
		"no brokers": second(outbox.NewRelay(store, nil, "t", nil)),
		"no topic":   second(outbox.NewRelay(store, brokers, "", nil)),
	} {
		if !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	db, pg := newPostgres(t, nil)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := outbox.NewRelay(pg.WithDB(tx), brokers, "t", nil); !errors.Is(err, outbox.ErrInvalid) {
		t.Errorf("a store on a transaction: %v, want ErrInvalid", err)
	}
	r, err := outbox.NewRelay(store, brokers, "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	<-r.Stopped()
}

// A relay refuses to start on an outbox written with more partitions than
// it has: the events of the partitions it does not cover would never be
// published, and their entities' order would be lost.
func TestRelayRefusesAnOutboxOfMorePartitions(t *testing.T) {
	t.Parallel()
	db, wide := newPostgres(t, &outbox.PostgresConfig{Partitions: 64})
	for i := range 20 {
		if _, err := wide.Write(ctx, outbox.Event{Key: "k" + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	narrow, err := outbox.NewPostgres(db.Pool, &outbox.PostgresConfig{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	r, err := outbox.NewRelay(narrow, []string{"127.0.0.1:1"}, "t", relayConfig("narrow"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop(ctx)
	if err := r.Start(ctx); !errors.Is(err, outbox.ErrInvalid) {
		t.Fatalf("Start = %v, want ErrInvalid", err)
	}
}

// The relay's fenced refusals are counted as outcomes.
func checkFencedMetric(t *testing.T, tel *telemetrytest.Telemetry, r *outbox.Relay) {
	t.Helper()
	s := r.Stats()
	if got := tel.Sum(t, "lockfree.outbox.fenced"); got != s.Fenced {
		t.Errorf("fenced metric %d, stats %d", got, s.Fenced)
	}
	refused := tel.Sum(t, "lockfree.outbox.failures", attribute.String(telemetry.Cause, "refused"))
	uncertain := tel.Sum(t, "lockfree.outbox.failures", attribute.String(telemetry.Cause, "uncertain"))
	database := tel.Sum(t, "lockfree.outbox.failures", attribute.String(telemetry.Cause, "database"))
	if refused+uncertain+database != s.Failed || uncertain != s.Uncertain {
		t.Errorf("failures metric %d + %d + %d (uncertain), stats %+v", refused, database, uncertain, s)
	}
}

// A relay publishes a Memory store's events as it does a Postgres store's.
func TestRelayOnMemory(t *testing.T) {
	t.Parallel()
	brokers := testkafka.Brokers(t)
	topic := testkafka.Topic(t, brokers, 2)
	store, err := outbox.NewMemory(&outbox.MemoryConfig{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := store.Write(ctx, outbox.Event{Key: "entity-" + strconv.Itoa(i%5)}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := outbox.NewRelay(store, brokers, topic, relayConfig("m"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(ctx)
	waitFor(t, 60*time.Second, func() bool { return len(store.Pending()) == 0 })
	var records int64
	for p := range 2 {
		records += hwm(t, brokers, topic, p)
	}
	if s := r.Stats(); s.Published != 20 || records != 20 {
		t.Fatalf("published %d, topic holds %d records; want 20", s.Published, records)
	}
}
