package main

import (
	"context"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/examples/internal/exampletest"
)

// The lines README.md shows.
func TestCacheRebuild(t *testing.T) {
	noLock := "no lock: 8 requests found the cache stale, 8 rebuilt it (7 wasted), 0 served the stale copy; the cache matches the source"
	cases := []struct {
		name string
		cfg  config
		want []string
	}{
		{"pause", config{Mode: "both", Pause: true}, []string{
			"lock: 8 requests found the cache stale, 2 rebuilt it (1 wasted: a holder outlived its lease), 6 served the stale copy; the cache matches the source",
			noLock,
		}},
		{"no pause", config{Mode: "both"}, []string{
			"lock: 8 requests found the cache stale, 1 rebuilt it, 7 served the stale copy; the cache matches the source",
			noLock,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			exampletest.Backends(t, func(t *testing.T, pool *pgxpool.Pool) {
				cfg := c.cfg
				cfg.DB = pool
				got := exampletest.Output(t, func(ctx context.Context, w io.Writer) error { return run(ctx, cfg, w) })
				exampletest.Lines(t, got, c.want...)
			})
		})
	}
}

func TestCacheRebuildRejectsUnknownMode(t *testing.T) {
	if err := run(context.Background(), config{Mode: "sideways"}, io.Discard); err == nil {
		t.Fatal("run accepted mode sideways")
	}
}
