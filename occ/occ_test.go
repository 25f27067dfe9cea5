package occ_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/occ"
)

type item struct {
	SKU     int32 `db:"sku"`
	Name    string
	Qty     int   `db:"qty"`
	Rev     int64 `db:"rev"`
	skipped int
}

type embedded struct {
	Base
	Rev int `db:"rev"`
}

type Base struct {
	ID   string `db:"id"`
	Body string `db:"body"`
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	type noVersion struct {
		ID string `db:"id"`
	}
	type badVersion struct {
		ID      string `db:"id"`
		Version string `db:"version"`
	}
	type dup struct {
		ID      string `db:"id"`
		Other   string `db:"id"`
		Version int64  `db:"version"`
	}
	type unexported struct {
		ID      string `db:"id"`
		secret  string `db:"secret"` //nolint:unused // an unexported field must be rejected
		Version int64  `db:"version"`
	}
	type anyKey struct {
		ID      any   `db:"id"`
		Version int64 `db:"version"`
	}
	type pointerKey struct {
		ID      *string `db:"id"`
		Version int64   `db:"version"`
	}
	skuRev := &occ.TableConfig{Key: "sku", Version: "rev"}
	tests := []struct {
		name string
		mk   func() error
	}{
		{"not a struct", func() error { _, err := occ.NewMemory[string, int](nil); return err }},
		{"no version field", func() error { _, err := occ.NewMemory[string, noVersion](nil); return err }},
		{"string version", func() error { _, err := occ.NewMemory[string, badVersion](nil); return err }},
		{"duplicate column", func() error { _, err := occ.NewMemory[string, dup](nil); return err }},
		{"tagged unexported field", func() error { _, err := occ.NewMemory[string, unexported](nil); return err }},
		{"interface key", func() error { _, err := occ.NewMemory[any, anyKey](nil); return err }},
		{"pointer key", func() error { _, err := occ.NewMemory[*string, pointerKey](nil); return err }},
		// The key type is the key field's type, exactly: no conversions.
		{"key type is not the field's", func() error { _, err := occ.NewMemory[int, item](skuRev); return err }},
		{"key type is a named string", func() error {
			_, err := occ.NewMemory[docID, embedded](&occ.TableConfig{Version: "rev"})
			return err
		}},
		{"key is version", func() error {
			_, err := occ.NewMemory[int32, item](&occ.TableConfig{Key: "rev", Version: "rev"})
			return err
		}},
		{"missing key column", func() error { _, err := occ.NewMemory[int32, item](&occ.TableConfig{Version: "rev"}); return err }},
		{"long column name", func() error {
			_, err := occ.NewMemory[int32, item](&occ.TableConfig{Key: strings.Repeat("k", 64), Version: "rev"})
			return err
		}},
		{"postgres without table", func() error { _, err := occ.NewPostgres[int32, item](nopDB{}, "", skuRev); return err }},
		{"postgres NUL in schema", func() error {
			_, err := occ.NewPostgres[int32, item](nopDB{}, "t", &occ.TableConfig{Schema: "a\x00b", Key: "sku", Version: "rev"})
			return err
		}},
		{"postgres nil db", func() error { _, err := occ.NewPostgres[int32, item](nil, "t", skuRev); return err }},
		{"fenced over a foreign store", func() error {
			_, err := occ.NewFenced[int32, item](nopLocks{}, foreign{}, nil)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.mk(); !errors.Is(err, occ.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
	if _, err := occ.NewMemory[string, embedded](&occ.TableConfig{Version: "rev"}); err != nil {
		t.Fatalf("embedded struct: %v", err)
	}
}

// docID is a named string type: keys of it are strings too, checked alike.
type docID string

type named struct {
	ID      docID `db:"id"`
	Body    string
	Version int64 `db:"version"`
}

// Keys are typed: an integer key round-trips as itself, and a named string
// type is validated like a string.
func TestTypedKeys(t *testing.T) {
	t.Parallel()
	s, err := occ.NewMemory[int32, item](&occ.TableConfig{Key: "sku", Version: "rev"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Insert(ctx, item{SKU: 7, Qty: 1, Name: "dropped", skipped: 1}); err != nil {
		t.Fatal(err)
	}
	it, v, err := s.Load(ctx, 7)
	if err != nil || v != 1 || it.SKU != 7 || it.Name != "" || it.skipped != 0 {
		t.Fatalf("Load(7) = %+v, %d, %v", it, v, err)
	}
	var c *occ.ConflictError
	if _, err := s.Insert(ctx, item{SKU: 7}); !errors.As(err, &c) || c.Key != "7" {
		t.Fatalf("Insert of an existing key: %v, want a conflict on key \"7\"", err)
	}
	n, err := occ.NewMemory[docID, named](nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []docID{"", "a\x00b", "\xff", docID(strings.Repeat("k", occ.MaxKeyLen+1))} {
		if _, err := n.Insert(ctx, named{ID: k}); !errors.Is(err, occ.ErrInvalid) {
			t.Errorf("Insert of named key %q: %v, want ErrInvalid", k, err)
		}
	}
	if _, err := n.Insert(ctx, named{ID: "ok"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Insert(ctx, named{ID: "ok"}); !errors.As(err, &c) || c.Key != "ok" {
		t.Fatalf("conflict on a named key: %v", err)
	}
}

func TestRetryOnConflict(t *testing.T) {
	t.Parallel()
	serialization := &pgconn.PgError{Code: "40001"}
	deadlock := &pgconn.PgError{Code: "40P01"}
	other := errors.New("other")
	fast := occ.Backoff{Steps: 3, Duration: time.Microsecond}
	conflict := &occ.ConflictError{Key: "k", Expected: 1, Actual: 2}
	tests := []struct {
		name     string
		errs     []error // returned by successive calls; nil after the list
		b        occ.Backoff
		calls    int
		want     error // matched with errors.Is; nil means success
		wrapping bool  // the final error wraps the last one
	}{
		{"success at once", nil, fast, 1, nil, false},
		{"success after conflicts", []error{conflict, conflict}, fast, 3, nil, false},
		{"serialization failure retried", []error{serialization}, fast, 2, nil, false},
		{"deadlock retried", []error{deadlock}, fast, 2, nil, false},
		{"other error not retried", []error{other, conflict}, fast, 1, other, false},
		{"not found not retried", []error{occ.ErrNotFound}, fast, 1, occ.ErrNotFound, false},
		{"gives up with the last conflict", []error{conflict, conflict, conflict, conflict}, fast, 3, occ.ErrConflict, true},
		{"zero steps means one attempt", []error{conflict}, occ.Backoff{}, 1, occ.ErrConflict, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			calls, retries := 0, 0
			err := occ.RetryOnConflict(ctx, func(context.Context) error {
				calls++
				if calls <= len(tt.errs) {
					return tt.errs[calls-1]
				}
				return nil
			}, occ.WithBackoff(tt.b), occ.OnRetry(func(attempt int, err error) {
				retries++
				if attempt != retries || !errors.Is(err, tt.errs[attempt-1]) {
					t.Errorf("OnRetry(%d, %v) before retry %d", attempt, err, retries)
				}
			}))
			if calls != tt.calls || retries != calls-1 {
				t.Fatalf("%d calls and %d retries, want %d and %d", calls, retries, tt.calls, tt.calls-1)
			}
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var c *occ.ConflictError
			if tt.wrapping && (!errors.As(err, &c) || c != conflict) {
				t.Fatalf("err = %v does not wrap the last *ConflictError", err)
			}
		})
	}
}

func TestRetryStopsWithContext(t *testing.T) {
	t.Parallel()
	cause := errors.New("shutting down")
	c, cancel := context.WithCancelCause(ctx)
	calls := 0
	err := occ.RetryOnConflict(c, func(context.Context) error {
		calls++
		cancel(cause)
		return &occ.ConflictError{Key: "1", Expected: 1, Actual: 2}
	}, occ.WithBackoff(occ.Backoff{Steps: 100, Duration: time.Hour}))
	if calls != 1 || !errors.Is(err, cause) || !errors.Is(err, occ.ErrConflict) {
		t.Fatalf("after %d calls: %v; want the cause and the last conflict", calls, err)
	}
	if err := occ.RetryOnConflict(c, func(context.Context) error {
		t.Fatal("called with a cancelled context")
		return nil
	}); !errors.Is(err, cause) {
		t.Fatalf("cancelled before the first attempt: %v", err)
	}
}

func TestPresets(t *testing.T) {
	t.Parallel()
	// client-go's values, which users of retry.RetryOnConflict know.
	if b := occ.DefaultRetry; b.Steps != 5 || b.Duration != 10*time.Millisecond || b.Factor != 1.0 || b.Jitter != 0.1 {
		t.Fatalf("DefaultRetry = %+v", b)
	}
	if b := occ.DefaultBackoff; b.Steps != 4 || b.Duration != 10*time.Millisecond || b.Factor != 5.0 || b.Jitter != 0.1 {
		t.Fatalf("DefaultBackoff = %+v", b)
	}
}

func TestConflictError(t *testing.T) {
	t.Parallel()
	err := error(&occ.ConflictError{Key: "a", Expected: 3, Actual: 4})
	if !errors.Is(err, occ.ErrConflict) || errors.Is(err, occ.ErrNotFound) || !occ.IsRetryable(err) {
		t.Fatal("ConflictError does not match ErrConflict alone")
	}
	if !strings.Contains(err.Error(), "expected version 3") || !strings.HasPrefix(err.Error(), "occ: ") {
		t.Fatalf("message %q", err)
	}
	if occ.IsRetryable(occ.ErrNotFound) || occ.IsRetryable(&pgconn.PgError{Code: "23505"}) {
		t.Fatal("non-retryable error reported retryable")
	}
}
