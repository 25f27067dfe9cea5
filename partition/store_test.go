package partition_test

import (
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/clock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/partition"
	"github.com/lockfree-go/lockfree/partition/partitiontest"
)

func TestMemoryMembership(t *testing.T) {
	t.Parallel()
	partitiontest.Run(t, func(t *testing.T) partitiontest.Harness {
		c := &clock.Manual{}
		return partitiontest.Harness{Store: partition.NewMemory(c), TTL: time.Second, Advance: c.Advance}
	})
}

func TestPostgresMembership(t *testing.T) {
	t.Parallel()
	partitiontest.Run(t, func(t *testing.T) partitiontest.Harness {
		db := testdb.New(t, partition.Migrations()...)
		return partitiontest.Harness{Store: newPostgres(t, db), TTL: 300 * time.Millisecond, Advance: time.Sleep}
	})
}

func newPostgres(t testing.TB, db *testdb.DB) *partition.Postgres {
	t.Helper()
	s, err := partition.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
