package kafkawriter

import (
	"context"

	"github.com/segmentio/kafka-go"
)

// EntityName exposes the progress and lock naming to the tests.
var EntityName = entityName

// Consume applies batch as if the consumer had fetched it.
func (c *FencedConsumer) Consume(ctx context.Context, batch []kafka.Message) error {
	return c.consume(ctx, ctx, batch)
}
