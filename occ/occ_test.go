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
	type sliceKey struct {
		ID      []byte `db:"id"`
		Version int64  `db:"version"`
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
	tests := []struct {
		name string
		mk   func() error
	}{
		{"not a struct", func() error { _, err := occ.NewMemory[int](occ.TableConfig{}); return err }},
		{"no version field", func() error { _, err := occ.NewMemory[noVersion](occ.TableConfig{}); return err }},
		{"string version", func() error { _, err := occ.NewMemory[badVersion](occ.TableConfig{}); return err }},
		{"slice key", func() error { _, err := occ.NewMemory[sliceKey](occ.TableConfig{}); return err }},
		{"duplicate column", func() error { _, err := occ.NewMemory[dup](occ.TableConfig{}); return err }},
		{"tagged unexported field", func() error { _, err := occ.NewMemory[unexported](occ.TableConfig{}); return err }},
		{"key is version", func() error {
			_, err := occ.NewMemory[item](occ.TableConfig{Key: "rev", Version: "rev"})
			return err
		}},
		{"missing key column", func() error { _, err := occ.NewMemory[item](occ.TableConfig{Version: "rev"}); return err }},
		{"long column name", func() error {
			_, err := occ.NewMemory[item](occ.TableConfig{Key: strings.Repeat("k", 64), Version: "rev"})
			return err
		}},
		{"postgres without table", func() error {
			_, err := occ.NewPostgres[item](nopDB{}, occ.TableConfig{Key: "sku", Version: "rev"})
			return err
		}},
		{"postgres NUL in schema", func() error {
			_, err := occ.NewPostgres[item](nopDB{}, occ.TableConfig{Schema: "a\x00b", Table: "t", Key: "sku", Version: "rev"})
			return err
		}},
		{"postgres nil db", func() error {
			_, err := occ.NewPostgres[item](nil, occ.TableConfig{Table: "t", Key: "sku", Version: "rev"})
			return err
		}},
		{"fenced over a foreign store", func() error {
			_, err := occ.NewFenced[item](nopLocks{}, foreign{}, occ.FencedConfig{})
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
	if _, err := occ.NewMemory[embedded](occ.TableConfig{Version: "rev"}); err != nil {
		t.Fatalf("embedded struct: %v", err)
	}
}

// Keys may be given as any integer (or string) type that holds them exactly.
func TestKeyConversion(t *testing.T) {
	t.Parallel()
	s, err := occ.NewMemory[item](occ.TableConfig{Key: "sku", Version: "rev"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Insert(ctx, item{SKU: 7, Qty: 1, Name: "dropped", skipped: 1}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []any{int32(7), 7, int64(7), uint8(7)} {
		it, v, err := s.Load(ctx, k)
		if err != nil || v != 1 || it.SKU != 7 || it.Name != "" || it.skipped != 0 {
			t.Fatalf("Load(%T 7) = %+v, %d, %v", k, it, v, err)
		}
	}
	for _, k := range []any{int64(1) << 40, -1 << 40, "7", 7.0} {
		if _, _, err := s.Load(ctx, k); !errors.Is(err, occ.ErrInvalid) {
			t.Fatalf("Load(%T %v): %v, want ErrInvalid", k, k, err)
		}
	}
}

func TestRetryOnConflict(t *testing.T) {
	t.Parallel()
	conflict := &occ.ConflictError{Key: "k", Expected: 1, Actual: 2}
	serialization := &pgconn.PgError{Code: "40001"}
	deadlock := &pgconn.PgError{Code: "40P01"}
	other := errors.New("other")
	fast := occ.Backoff{Steps: 3, Duration: time.Microsecond}
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
			calls := 0
			err := occ.RetryOnConflict(ctx, tt.b, func(context.Context) error {
				calls++
				if calls <= len(tt.errs) {
					return tt.errs[calls-1]
				}
				return nil
			})
			if calls != tt.calls {
				t.Fatalf("%d calls, want %d", calls, tt.calls)
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
	err := occ.RetryOnConflict(c, occ.Backoff{Steps: 100, Duration: time.Hour}, func(context.Context) error {
		calls++
		cancel(cause)
		return &occ.ConflictError{Key: 1, Expected: 1, Actual: 2}
	})
	if calls != 1 || !errors.Is(err, cause) || !errors.Is(err, occ.ErrConflict) {
		t.Fatalf("after %d calls: %v; want the cause and the last conflict", calls, err)
	}
	if err := occ.RetryOnConflict(c, occ.DefaultRetry, func(context.Context) error {
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
