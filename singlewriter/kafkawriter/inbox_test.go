package kafkawriter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

func TestInboxClaimAndAdvance(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, kafkawriter.Migrations()...)
	inbox, err := kafkawriter.NewInbox(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := inbox.Offset(ctx, "g", "t", 0); ok || err != nil {
		t.Fatalf("Offset before any claim: ok=%v err=%v", ok, err)
	}
	a, err := inbox.Claim(ctx, "g", "t", 0, "a", kafka.FirstOffset)
	if err != nil || a.Epoch != 1 || a.Next != kafka.FirstOffset {
		t.Fatalf("first claim = %+v, %v", a, err)
	}
	if err := inbox.Advance(ctx, a, a.Next, 5); err != nil {
		t.Fatal(err)
	}
	if err := checkStaleAdvance(inbox, a); err != nil {
		t.Fatal(err)
	}
	b, err := inbox.Claim(ctx, "g", "t", 0, "b", kafka.FirstOffset)
	if err != nil || b.Epoch != 2 || b.Next != 5 || b.Holder != "b" {
		t.Fatalf("takeover claim = %+v, %v", b, err)
	}
	if err := checkZombieAdvance(inbox, a, b); err != nil {
		t.Fatal(err)
	}
	// Inside a transaction that rolls back, nothing moves.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := inbox.WithDB(tx).Advance(ctx, b, 5, 9); err != nil {
		t.Fatal(err)
	}
	tx.Rollback(ctx)
	if next, epoch, ok, err := inbox.Offset(ctx, "g", "t", 0); next != 5 || epoch != 2 || !ok || err != nil {
		t.Fatalf("after rollback: %d/%d/%v/%v", next, epoch, ok, err)
	}

	for name, err := range map[string]error{
		"empty group":   claimErr(inbox, "", "t", 0, kafka.FirstOffset),
		"empty topic":   claimErr(inbox, "g", "", 0, kafka.FirstOffset),
		"neg partition": claimErr(inbox, "g", "t", -1, kafka.FirstOffset),
		"bad start":     claimErr(inbox, "g", "t", 0, 42),
		"backwards":     inbox.Advance(ctx, b, 5, 5),
		"nil DB":        inbox.WithDB(nil).Advance(ctx, b, 5, 6),
		"holder NUL":    func() error { _, err := inbox.Claim(ctx, "g", "t", 0, "a\x00", kafka.FirstOffset); return err }(),
	} {
		if !errors.Is(err, kafkawriter.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// checkStaleAdvance guards the inbox's compare-and-set on the offset: a's
// advance from an offset that is not the stored one (5) must fail with a
// *StaleOffsetError and move nothing.
func checkStaleAdvance(inbox *kafkawriter.Inbox, a kafkawriter.Claim) error {
	var stale *kafkawriter.StaleOffsetError
	err := inbox.Advance(ctx, a, 3, 6)
	if !errors.As(err, &stale) || stale.Expected != 3 || stale.Actual != 5 || !errors.Is(err, kafkawriter.ErrStaleOffset) {
		return fmt.Errorf("advance from offset 3 with 5 stored = %v, want a *StaleOffsetError", err)
	}
	return nil
}

// checkZombieAdvance guards the owner's epoch: after b claimed the
// partition, a's advance from the right offset must fail with a
// *FencedError naming both epochs.
func checkZombieAdvance(inbox *kafkawriter.Inbox, a, b kafkawriter.Claim) error {
	var fenced *kafkawriter.FencedError
	err := inbox.Advance(ctx, a, b.Next, b.Next+1)
	if !errors.As(err, &fenced) || fenced.Presented != a.Epoch || fenced.Required != b.Epoch || !errors.Is(err, kafkawriter.ErrFenced) {
		return fmt.Errorf("zombie advance (epoch %d after claim %d) = %v, want a *FencedError", a.Epoch, b.Epoch, err)
	}
	return nil
}

func claimErr(in *kafkawriter.Inbox, g, topic string, p int, start int64) error {
	_, err := in.Claim(ctx, g, topic, p, "x", start)
	return err
}

// TestNilDBIsInvalid: a nil DB, untyped or a nil *pgxpool.Pool, is an
// ErrInvalid at construction (or at the call that takes it), not a panic at
// first use.
func TestNilDBIsInvalid(t *testing.T) {
	t.Parallel()
	var nilPool *pgxpool.Pool
	locks := memoryLocks(nil)
	h := func(context.Context, pgx.Tx, kafka.Message) error { return nil }
	src := kafkawriter.Source{Brokers: []string{"x:1"}, GroupID: "g", Topic: "t"}
	calls := map[string]func() error{
		"NewInbox(nil)":      func() error { _, err := kafkawriter.NewInbox(nil, nil); return err },
		"NewInbox(nil pool)": func() error { _, err := kafkawriter.NewInbox(nilPool, nil); return err },
		"NewFenced(nil pool)": func() error {
			_, err := kafkawriter.NewFenced(nilPool, locks, nil)
			return err
		},
		"NewFenced(nil locks)": func() error {
			_, err := kafkawriter.NewFenced(&pgxpool.Pool{}, (*fencedlock.Memory)(nil), nil)
			return err
		},
		"NewConsumer(nil pool)": func() error {
			_, err := kafkawriter.NewConsumer(nilPool, src, h, nil)
			return err
		},
		"NewFencedConsumer(nil pool)": func() error {
			_, err := kafkawriter.NewFencedConsumer(nilPool, locks, src, h, nil)
			return err
		},
	}
	for name, call := range calls {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s panicked: %v", name, r)
				}
			}()
			if err := call(); !errors.Is(err, kafkawriter.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}()
	}
}

// TestErrorsQuoteNamesShort: an error about a user-supplied name quotes a
// bounded prefix of it, never the whole name.
func TestErrorsQuoteNamesShort(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("t", 10000)
	h := func(context.Context, pgx.Tx, kafka.Message) error { return nil }
	errs := map[string]error{
		"CreateTopic": kafkawriter.CreateTopic(ctx, []string{"x:1"}, long, 0, 1),
		"NewConsumer": func() error {
			_, err := kafkawriter.NewConsumer(&pgxpool.Pool{}, kafkawriter.Source{Brokers: []string{"x:1"}, GroupID: long, Topic: "t"}, h, nil)
			return err
		}(),
		"Holder": func() error {
			_, err := kafkawriter.NewConsumer(&pgxpool.Pool{}, kafkawriter.Source{Brokers: []string{"x:1"}, GroupID: "g", Topic: "t"}, h,
				&kafkawriter.ConsumerConfig{Holder: long})
			return err
		}(),
	}
	for name, err := range errs {
		if !errors.Is(err, kafkawriter.ErrInvalid) || len(err.Error()) > 400 {
			t.Errorf("%s: %d-byte error %.100q…, want a short ErrInvalid", name, len(fmt.Sprint(err)), err)
		}
	}
}
