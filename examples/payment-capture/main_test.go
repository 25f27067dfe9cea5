package main

import (
	"context"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/examples/internal/exampletest"
)

var httpLines = []string{
	`http: POST /payments/pay-1/capture, Idempotency-Key "c-1", {"amount":4200} → 201 Created {"capture":1}`,
	`http: the same request again → 201 Created {"capture":1}, Idempotent-Replayed: true`,
	`http: Idempotency-Key "c-1", {"amount":9900} → 422 Unprocessable Entity: Idempotency-Key reused`,
	`http: no Idempotency-Key → 400 Bad Request: Idempotency-Key missing`,
}

// The lines README.md shows.
func TestPaymentCapture(t *testing.T) {
	cases := []struct {
		name string
		cfg  config
		want []string
	}{
		{"pause", config{Mode: "both", Pause: true}, append([]string{
			"lock (naive): the provider charged pay-1 2 times; 2 captures recorded — double charge",
			"lock (fenced): the provider charged pay-1 2 times; 1 capture recorded, 1 record fenced off after its pause — double charge, 1 charge unrecorded",
			`transactional: 1 capture recorded; first: 201 {"capture":1}; retry 1: 409 in flight; retry 2: 201 {"capture":1} replayed`,
			`leased: the provider charged pay-1 once (2 calls, one derived key); first: superseded; retry 1: 201 {"charge":"ch_1"}; retry 2: 201 {"charge":"ch_1"} replayed`,
		}, httpLines...)},
		{"no pause", config{Mode: "both"}, append([]string{
			"lock (naive): the provider charged pay-1 once; 1 capture recorded",
			"lock (fenced): the provider charged pay-1 once; 1 capture recorded",
			`transactional: 1 capture recorded; first: 201 {"capture":1}; retry 1: 201 {"capture":1} replayed; retry 2: 201 {"capture":1} replayed`,
			`leased: the provider charged pay-1 once (1 call, one derived key); first: 201 {"charge":"ch_1"}; retry 1: 201 {"charge":"ch_1"} replayed; retry 2: 201 {"charge":"ch_1"} replayed`,
		}, httpLines...)},
		{"lock only", config{Mode: "lock", Pause: true}, []string{
			"lock (naive): the provider charged pay-1 2 times; 2 captures recorded — double charge",
			"lock (fenced): the provider charged pay-1 2 times; 1 capture recorded, 1 record fenced off after its pause — double charge, 1 charge unrecorded",
		}},
	}
	for _, c := range cases {
		// One case after the other: the PostgreSQL runs of both cases share
		// a database (a schema each), and the idempotency store's advisory
		// lock of a key does not tell schemas apart when Schema is unset:
		// the paused run's first attempt held the lock the other run's
		// first attempt waited for ("409 in flight").
		t.Run(c.name, func(t *testing.T) {
			exampletest.Backends(t, func(t *testing.T, pool *pgxpool.Pool) {
				cfg := c.cfg
				cfg.DB = pool
				got := exampletest.Output(t, func(ctx context.Context, w io.Writer) error { return run(ctx, cfg, w) })
				exampletest.Lines(t, got, c.want...)
			})
		})
	}
}

func TestPaymentCaptureRejectsUnknownMode(t *testing.T) {
	if err := run(context.Background(), config{Mode: "sideways"}, io.Discard); err == nil {
		t.Fatal("run accepted mode sideways")
	}
}
