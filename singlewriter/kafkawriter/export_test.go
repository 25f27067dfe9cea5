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

// ApplyFetched applies batches to partition p as the partition's owner
// would apply them, fetched in that order: it claims p, then applies each.
func (c *Consumer) ApplyFetched(ctx context.Context, p int, batches ...[]kafka.Message) error {
	claim, err := c.inbox.Claim(ctx, c.src.GroupID, c.src.Topic, p, c.cfg.Holder, c.set.startOffset)
	if err != nil {
		return err
	}
	pp := &partitionRun{c: c, work: ctx, claim: claim, expected: claim.Next, log: c.set.logger}
	for _, b := range batches {
		if err := pp.apply(ctx, b); err != nil {
			return err
		}
	}
	return nil
}
