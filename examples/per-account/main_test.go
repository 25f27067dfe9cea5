package main

import (
	"context"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/examples/internal/exampletest"
)

// The lines README.md shows.
func TestPerAccount(t *testing.T) {
	cases := []struct {
		name string
		cfg  config
		want []string
	}{
		{"pause", config{Mode: "both", Pause: true}, []string{
			"lock (naive): account-42 has entries 1 2 3 1 — 1 duplicate",
			"lock (fenced): account-42 has entries 1 2 3 4 — gapless; 1 append fenced off after its pause and run again",
			"partition: account-42 has entries 1 2 3 4 — gapless; 1 append fenced off after its pause and run again",
		}},
		{"no pause", config{Mode: "both"}, []string{
			"lock (naive): account-42 has entries 1 2 3 4 — gapless",
			"lock (fenced): account-42 has entries 1 2 3 4 — gapless",
			"partition: account-42 has entries 1 2 3 4 — gapless",
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

func TestPerAccountRejectsUnknownMode(t *testing.T) {
	if err := run(context.Background(), config{Mode: "sideways"}, io.Discard); err == nil {
		t.Fatal("run accepted mode sideways")
	}
}
