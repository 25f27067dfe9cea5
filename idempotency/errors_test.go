package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/idempotency"
)

// Errors quote keys shortened: a long key or tenant does not make a long
// error.
func TestErrorsShortenKeys(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", idempotency.MaxKeyLen)
	key := idempotency.Key{Tenant: strings.Repeat("t", idempotency.MaxKeyLen), ID: long}
	if s := key.String(); len(s) > 200 || !strings.Contains(s, "(255 bytes)") {
		t.Fatalf("Key.String() is %d bytes: %s", len(s), s)
	}
	if s := (idempotency.Key{ID: strings.Repeat("k", 10<<10)}).String(); len(s) > 100 {
		t.Fatalf("a 10 KB key's String() is %d bytes", len(s))
	}
	store, _ := idempotency.NewMemory(nil)
	ok := func(context.Context) (idempotency.Result, error) { return idempotency.Result{Status: 200}, nil }
	if _, err := store.Do(ctx, key, idempotency.NewFingerprint([]byte("a")), ok); err != nil {
		t.Fatal(err)
	}
	_, err := store.Do(ctx, key, idempotency.NewFingerprint([]byte("b")), ok)
	if !errors.Is(err, idempotency.ErrKeyReused) || len(err.Error()) > 300 {
		t.Fatalf("reused key: %d-byte error %v", len(err.Error()), err)
	}
	for _, err := range []error{
		&idempotency.InFlightError{Key: key},
		&idempotency.SupersededError{Key: key, Presented: 2, Required: 3},
	} {
		if len(err.Error()) > 300 {
			t.Errorf("%T is %d bytes: %v", err, len(err.Error()), err)
		}
	}
}

// Constructors refuse what would fail later, with an error matching
// ErrInvalid.
func TestConstructorsRejectBadInput(t *testing.T) {
	t.Parallel()
	store, _ := idempotency.NewMemory(nil)
	for name, fn := range map[string]func() error{
		"NewPostgres(nil)": func() error { _, err := idempotency.NewPostgres(nil, nil); return err },
		"NewPostgres(nil pool)": func() error {
			_, err := idempotency.NewPostgres((*pgxpool.Pool)(nil), nil)
			return err
		},
		"NewPostgres(nil conn)": func() error { _, err := idempotency.NewPostgres((*pgx.Conn)(nil), nil); return err },
		"NewMemory(negative retention)": func() error {
			_, err := idempotency.NewMemory(&idempotency.MemoryConfig{Retention: -time.Hour})
			return err
		},
		"NewLeased(nil)": func() error { _, err := idempotency.NewLeased(nil, nil); return err },
		"NewLeased(TTL over MaxTTL)": func() error {
			_, err := idempotency.NewLeased(store, &idempotency.LeasedConfig{TTL: idempotency.MaxTTL + 1})
			return err
		},
		"NewFenced(nil)": func() error { _, err := idempotency.NewFenced(nil, store, nil); return err },
	} {
		if err := fn(); !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%s = %v, want ErrInvalid", name, err)
		}
	}
}
