package main

import (
	"context"
	"io"
	"testing"

	"github.com/lockfree-go/lockfree/examples/internal/exampletest"
	"github.com/lockfree-go/lockfree/examples/internal/orderchain"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
)

const faultsLine = "faults: the answer to pen is lost; so are the publish answer of ink and the consumer's COMMIT answer of tea; " +
	"the publisher of cap stops after its commit"

// The whole chain on PostgreSQL and Kafka, each in a schema and topics of
// its own. Skipped without TEST_DATABASE_URL and TEST_KAFKA_BROKERS (or
// Docker); failed under CI=true.
func TestOrders(t *testing.T) {
	brokers := testkafka.Brokers(t)
	cases := []struct {
		name string
		cfg  orderchain.Config
		want []string
	}{
		{"faults", orderchain.Config{Mode: "both", Faults: true}, []string{
			faultsLine,
			"lock, write, publish: database o-1 book pen pen ink cap cap, o-2 mug tea: 8 lines for 6 requests",
			"lock, write, publish: read model o-1 book pen pen ink ink cap, o-2 mug tea tea, from 8 Kafka records: 2 lines applied twice, 1 line lost",
			"exactly once: database o-1 book pen ink cap, o-2 mug tea: 6 lines for 6 requests",
			"exactly once: read model o-1 book pen ink cap, o-2 mug tea, from 8 Kafka records: each line once, in order",
		}},
		{"no faults", orderchain.Config{Mode: "lock"}, []string{
			"lock, write, publish: database o-1 book pen ink cap, o-2 mug tea: 6 lines for 6 requests",
			"lock, write, publish: read model o-1 book pen ink cap, o-2 mug tea, from 6 Kafka records: each line once, in order",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := c.cfg
			cfg.DB, cfg.Kafka = testdb.New(t).Pool, brokers
			got := exampletest.Output(t, func(ctx context.Context, w io.Writer) error { return run(ctx, cfg, w) })
			exampletest.Lines(t, got, c.want...)
		})
	}
}

func TestOrdersRejectsUnknownMode(t *testing.T) {
	if err := run(context.Background(), orderchain.Config{Mode: "sideways"}, io.Discard); err == nil {
		t.Fatal("run accepted mode sideways")
	}
}
