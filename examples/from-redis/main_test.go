package main

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/lockfree-go/lockfree/examples/internal/exampletest"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// redisAddr is the test Redis server (TEST_REDIS_ADDR); the test skips
// without one, and fails under CI=true.
func redisAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("TEST_REDIS_ADDR")
	if addr == "" {
		testdb.Missing(t, "Redis", "TEST_REDIS_ADDR is unset")
	}
	return addr
}

// The lines README.md shows.
func TestFromRedis(t *testing.T) {
	addr := redisAddr(t)
	cases := []struct {
		name string
		cfg  config
		want []string
	}{
		{"pause", config{Mode: "both", Pause: true}, []string{
			"redislock: sold 11 of 10 units — oversold by 1; the stock row says 9 left",
			"atomic: sold 10 of 10 units, 5 refused; 0 left",
		}},
		{"no pause", config{Mode: "both"}, []string{
			"redislock: sold 10 of 10 units, 5 refused; 0 left",
			"atomic: sold 10 of 10 units, 5 refused; 0 left",
		}},
		{"alternative only", config{Mode: "alternative", Pause: true}, []string{
			"atomic: sold 10 of 10 units, 5 refused; 0 left",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := c.cfg
			cfg.DB, cfg.Redis = testdb.New(t).Pool, addr
			got := exampletest.Output(t, func(ctx context.Context, w io.Writer) error { return run(ctx, cfg, w) })
			exampletest.Lines(t, got, c.want...)
		})
	}
}

// Without Redis the lock-based half says it was skipped, and why.
func TestFromRedisWithoutRedis(t *testing.T) {
	cfg := config{DB: testdb.New(t).Pool, Mode: "both", Pause: true}
	got := exampletest.Output(t, func(ctx context.Context, w io.Writer) error { return run(ctx, cfg, w) })
	exampletest.Lines(t, got,
		"redislock: skipped: no Redis (-redis host:port, or install redis-server)",
		"atomic: sold 10 of 10 units, 5 refused; 0 left")
}

func TestFromRedisRejectsUnknownMode(t *testing.T) {
	if err := run(context.Background(), config{Mode: "sideways"}, io.Discard); err == nil {
		t.Fatal("run accepted mode sideways")
	}
}
