package kafkawriter_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// Inbox epochs are minted in fence eras: a partition's first claim is at
// least its era's first epoch, and a partition claimed with plain epochs
// before the upgrade goes on above them. When the era goes back, Claim
// fails with ErrFenceEra naming fence_advance; on a read-only connection
// with ErrFenceReadOnly.
func TestInboxEpochsInFenceEras(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, kafkawriter.Migrations()...)
	inbox, err := kafkawriter.NewInbox(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := inbox.Claim(ctx, "g", "t", 0, "a", kafka.FirstOffset)
	if err != nil || first.Epoch < fence.EraSize {
		t.Fatalf("first claim = %+v, %v: want an epoch of a fence era (≥ 2^40)", first, err)
	}
	const before = 41 // a row an earlier version claimed with epoch + 1
	if _, err := db.Pool.Exec(ctx, `INSERT INTO lockfree_inbox_offsets
		(group_id, topic, partition, next_offset, owner, epoch, claimed_at, updated_at)
		VALUES ('g', 't', 1, 0, 'old', $1, now(), now())`, before); err != nil {
		t.Fatal(err)
	}
	if c, err := inbox.Claim(ctx, "g", "t", 1, "a", kafka.FirstOffset); err != nil || c.Epoch <= before || c.Epoch < fence.EraSize {
		t.Errorf("claim of a partition with a plain epoch %d = %+v, %v", before, c, err)
	}

	ro, err := pgx.Connect(ctx, db.URL+"&default_transaction_read_only=on")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close(context.Background())
	if _, err := inbox.WithDB(ro).Claim(ctx, "g", "t", 2, "a", kafka.FirstOffset); !errors.Is(err, kafkawriter.ErrFenceReadOnly) {
		t.Errorf("Claim on a read-only connection: %v, want ErrFenceReadOnly", err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT setval('lockfree_fence_eras', $1)`, first.Epoch/fence.EraSize+5); err != nil {
		t.Fatal(err)
	}
	_, err = inbox.Claim(ctx, "g", "t", 0, "b", kafka.FirstOffset)
	var fenceErr *kafkawriter.FenceError
	if !errors.Is(err, kafkawriter.ErrFenceEra) || !errors.As(err, &fenceErr) || !strings.Contains(err.Error(), `SELECT "lockfree_fence_advance"()`) {
		t.Errorf("Claim with the era gone back: %v, want a *FenceError matching ErrFenceEra", err)
	}
	t.Log(err)
}
