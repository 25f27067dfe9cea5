package main

import (
	"context"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/examples/internal/exampletest"
)

// The lines README.md shows.
func TestInventory(t *testing.T) {
	cases := []struct {
		name string
		cfg  config
		want []string
	}{
		{"pause", config{Mode: "both", Pause: true}, []string{
			"lock (naive): sold 11 of 10 units — oversold by 1; the stock row says 9 left",
			"lock (fenced): sold 10 of 10 units, 5 refused (1 of them fenced off after its pause); 0 left",
			"atomic: sold 10 of 10 units, 5 refused; 0 left",
		}},
		{"no pause", config{Mode: "both"}, []string{
			"lock (naive): sold 10 of 10 units, 5 refused; 0 left",
			"lock (fenced): sold 10 of 10 units, 5 refused; 0 left",
			"atomic: sold 10 of 10 units, 5 refused; 0 left",
		}},
		{"alternative only", config{Mode: "alternative", Pause: true}, []string{
			"atomic: sold 10 of 10 units, 5 refused; 0 left",
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

func TestInventoryRejectsUnknownMode(t *testing.T) {
	if err := run(context.Background(), config{Mode: "sideways"}, io.Discard); err == nil {
		t.Fatal("run accepted mode sideways")
	}
}
