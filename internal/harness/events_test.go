package harness

import (
	"context"
	"testing"

	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// A consumer's poll reaches both entities it competes for, however far
// behind the one it takes first is: the entity of a stopped consumer is
// taken over even while the taker's own stream is busy.
func TestEventsPollReachesEveryEntity(t *testing.T) {
	db := testdb.New(t, (events{}).Migrations()...)
	ctx := context.Background()
	sizes := Sizes{Keys: 1, Clients: 8}
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
	c := &consumer{env: &Env{Client: 1, Params: Params{Sizes: sizes}, DB: db.Pool}}
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
