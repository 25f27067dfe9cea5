package idempotency_test

import (
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/idempotency/idempotencytest"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	idempotencytest.Run(t, func(t *testing.T, cfg idempotencytest.Config) idempotencytest.Harness {
		c := &clock.Manual{}
		s, err := idempotency.NewMemory(&idempotency.MemoryConfig{Clock: c, Retention: cfg.Retention,
			TombstoneRetention: cfg.TombstoneRetention, InFlightWait: cfg.InFlightWait})
		if err != nil {
			t.Fatal(err)
		}
		return idempotencytest.Harness{Store: s, TTL: time.Second, Advance: c.Advance}
	})
}

func TestPostgresStore(t *testing.T) {
	t.Parallel()
	idempotencytest.Run(t, func(t *testing.T, cfg idempotencytest.Config) idempotencytest.Harness {
		db := testdb.New(t, idempotency.Migrations()...)
		s, err := idempotency.NewPostgres(db.Pool, &idempotency.PostgresConfig{Retention: cfg.Retention,
			TombstoneRetention: cfg.TombstoneRetention, InFlightWait: cfg.InFlightWait})
		if err != nil {
			t.Fatal(err)
		}
		return idempotencytest.Harness{Store: s, TTL: 300 * time.Millisecond, Advance: time.Sleep}
	})
}
