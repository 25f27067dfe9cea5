package main

import (
	"context"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/examples/internal/exampletest"
)

var httpLines = []string{
	`http: Bob   PUT with If-Match "v1" → 200 OK, ETag "v2"`,
	`http: Alice PUT with If-Match "v1" → 412 Precondition Failed, ETag "v2"`,
	`http: Alice PUT with no If-Match → 428 Precondition Required`,
	`http: Alice PUT with If-Match "v2" → 200 OK, ETag "v3"`,
}

// The lines README.md shows.
func TestDocuments(t *testing.T) {
	cases := []struct {
		name string
		cfg  config
		want []string
	}{
		{"pause", config{Mode: "both", Pause: true}, append([]string{
			"lock (naive): 5 of 5 saves acknowledged, 1 edit in the document — 4 lost",
			"lock (fenced): 4 of 5 saves acknowledged, 4 edits in the document; 1 save fenced off after its pause (load and edit again)",
			"occ: 5 of 5 saves acknowledged, 5 edits in the document; 1 retry after a version conflict",
		}, httpLines...)},
		{"no pause", config{Mode: "both"}, append([]string{
			"lock (naive): 5 of 5 saves acknowledged, 5 edits in the document",
			"lock (fenced): 5 of 5 saves acknowledged, 5 edits in the document",
			"occ: 5 of 5 saves acknowledged, 5 edits in the document; 0 retries after a version conflict",
		}, httpLines...)},
		{"lock only", config{Mode: "lock", Pause: true}, []string{
			"lock (naive): 5 of 5 saves acknowledged, 1 edit in the document — 4 lost",
			"lock (fenced): 4 of 5 saves acknowledged, 4 edits in the document; 1 save fenced off after its pause (load and edit again)",
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

func TestDocumentsRejectsUnknownMode(t *testing.T) {
	if err := run(context.Background(), config{Mode: "sideways"}, io.Discard); err == nil {
		t.Fatal("run accepted mode sideways")
	}
}
