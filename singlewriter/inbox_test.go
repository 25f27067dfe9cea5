package singlewriter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/singlewriter"
)

func TestInboxClaimAndAdvance(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, singlewriter.Migrations()...)
	inbox, err := singlewriter.NewInbox(db.Pool, nil)
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
	if err := inbox.Advance(ctx, db.Pool, a, a.Next, 5); err != nil {
		t.Fatal(err)
	}
	var stale *singlewriter.StaleOffsetError
	if err := inbox.Advance(ctx, db.Pool, a, 3, 6); !errors.As(err, &stale) || stale.Expected != 3 || stale.Actual != 5 {
		t.Fatalf("advance from a wrong offset = %v", err)
	}
	b, err := inbox.Claim(ctx, "g", "t", 0, "b", kafka.FirstOffset)
	if err != nil || b.Epoch != 2 || b.Next != 5 {
		t.Fatalf("takeover claim = %+v, %v", b, err)
	}
	// The old owner, with the right offset, is fenced by the epoch.
	var fenced *singlewriter.FencedError
	if err := inbox.Advance(ctx, db.Pool, a, 5, 6); !errors.As(err, &fenced) || fenced.Presented != 1 || fenced.Current != 2 {
		t.Fatalf("zombie advance = %v", err)
	}
	if !errors.Is(fenced, singlewriter.ErrFenced) || !errors.Is(stale, singlewriter.ErrStaleOffset) {
		t.Fatal("typed errors do not match their sentinels")
	}
	// Inside a transaction that rolls back, nothing moves.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := inbox.Advance(ctx, tx, b, 5, 9); err != nil {
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
		"backwards":     inbox.Advance(ctx, db.Pool, b, 5, 5),
	} {
		if !errors.Is(err, singlewriter.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func claimErr(in *singlewriter.Inbox, g, topic string, p int, start int64) error {
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
	calls := map[string]func() error{
		"NewInbox(nil)":      func() error { _, err := singlewriter.NewInbox(nil, nil); return err },
		"NewInbox(nil pool)": func() error { _, err := singlewriter.NewInbox(nilPool, nil); return err },
		"NewFenced(nil pool)": func() error {
			_, err := singlewriter.NewFenced(nilPool, singlewriter.FencedConfig{Locks: locks})
			return err
		},
		"NewConsumer(nil pool)": func() error {
			_, err := singlewriter.NewConsumer(singlewriter.ConsumerConfig{Brokers: []string{"x:1"}, GroupID: "g", Topic: "t", DB: nilPool, Handler: h})
			return err
		},
		"NewFencedConsumer(nil pool)": func() error {
			_, err := singlewriter.NewFencedConsumer(singlewriter.FencedConsumerConfig{Brokers: []string{"x:1"}, GroupID: "g", Topic: "t",
				DB: nilPool, Handler: h, Fenced: singlewriter.FencedConfig{Locks: locks}})
			return err
		},
		"Advance on a nil DB": func() error {
			db := testdb.New(t, singlewriter.Migrations()...)
			inbox, err := singlewriter.NewInbox(db.Pool, nil)
			if err != nil {
				return err
			}
			c, err := inbox.Claim(ctx, "g", "t", 0, "a", kafka.FirstOffset)
			if err != nil {
				return err
			}
			return inbox.Advance(ctx, nil, c, c.Next, 1)
		},
	}
	for name, call := range calls {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s panicked: %v", name, r)
				}
			}()
			if err := call(); !errors.Is(err, singlewriter.ErrInvalid) {
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
		"CreateTopic": singlewriter.CreateTopic(ctx, []string{"x:1"}, long, 0, 1),
		"NewConsumer": func() error {
			_, err := singlewriter.NewConsumer(singlewriter.ConsumerConfig{Brokers: []string{"x:1"}, GroupID: long, Topic: "t",
				DB: &pgxpool.Pool{}, Handler: h})
			return err
		}(),
	}
	for name, err := range errs {
		if !errors.Is(err, singlewriter.ErrInvalid) || len(err.Error()) > 400 {
			t.Errorf("%s: %d-byte error %.100q…, want a short ErrInvalid", name, len(fmt.Sprint(err)), err)
		}
	}
}
