package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
	store, _ := idempotency.NewMemory(nil, nil)
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
		&idempotency.SupersededError{Key: key, Presented: 2, Current: 3},
	} {
		if len(err.Error()) > 300 {
			t.Errorf("%T is %d bytes: %v", err, len(err.Error()), err)
		}
	}
}
