package harness

import (
	"context"
	"testing"

	"github.com/lockfree-go/lockfree/internal/testdb"
)

// A consumer's poll reaches both entities it competes for, however far
// behind the one it takes first is: the entity of a stopped consumer is
// taken over even while the taker's own stream is busy.
func TestEventsPollReachesEveryEntity(t *testing.T) {
	db := testdb.New(t)
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
