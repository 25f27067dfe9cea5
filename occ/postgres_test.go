package occ_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/occ/occtest"
)

// A user's table whose names need quoting, addressed through its schema.
func TestPostgresQuotedNames(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE "Stock Items" (
		"SKU" integer PRIMARY KEY, "qty" integer NOT NULL, "Rev" bigint NOT NULL, extra text DEFAULT 'untouched')`); err != nil {
		t.Fatal(err)
	}
	type stock struct {
		SKU int32 `db:"SKU"`
		Qty int   `db:"qty"`
		Rev int64 `db:"Rev"`
	}
	s, err := occ.NewPostgres[int32, stock](db.Pool, "Stock Items", &occ.TableConfig{Schema: db.Schema, Key: "SKU", Version: "Rev"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Insert(ctx, stock{SKU: 1, Qty: 5}); err != nil {
		t.Fatal(err)
	}
	v, err := occ.Update(ctx, s, 1, func(st *stock) error { st.Qty--; return nil })
	if err != nil || v != 2 {
		t.Fatalf("Update = %d, %v", v, err)
	}
	got, v, err := s.Load(ctx, 1)
	if err != nil || got != (stock{SKU: 1, Qty: 4, Rev: 2}) || v != 2 {
		t.Fatalf("Load = %+v, %d, %v", got, v, err)
	}
	var extra string
	if err := db.Pool.QueryRow(ctx, `SELECT extra FROM "Stock Items"`).Scan(&extra); err != nil || extra != "untouched" {
		t.Fatalf("a column outside the struct changed: %q, %v", extra, err)
	}
	if err := s.Delete(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
}

// Every operation runs inside the caller's transaction.
func TestPostgresInCallerTransaction(t *testing.T) {
	t.Parallel()
	db := newDocs(t)
	s, err := occ.NewPostgres[string, occtest.Doc](db.Pool, occtest.TableName, &occtest.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Insert(ctx, occtest.Doc{ID: "d", Title: "before"}); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := occ.Update(ctx, s.WithDB(tx), "d", func(d *occtest.Doc) error { d.Title = "inside"; return nil }); err != nil || v != 2 {
		t.Fatalf("Update in tx = %d, %v", v, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if d, v, err := s.Load(ctx, "d"); err != nil || d.Title != "before" || v != 1 {
		t.Fatalf("after rollback: %+v at %d, %v", d, v, err)
	}
}

// A REPEATABLE READ transaction that updates a row changed since its
// snapshot gets SQLSTATE 40001: reported as ErrAborted, retryable, and the
// retry (of the whole transaction) succeeds.
func TestPostgresSerializationFailure(t *testing.T) {
	t.Parallel()
	db := newDocs(t)
	s, err := occ.NewPostgres[string, occtest.Doc](db.Pool, occtest.TableName, &occtest.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Insert(ctx, occtest.Doc{ID: "d"}); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	err = occ.RetryOnConflict(ctx, func(ctx context.Context) error {
		attempts++
		return pgx.BeginTxFunc(ctx, db.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			d, v, err := s.WithDB(tx).Load(ctx, "d")
			if err != nil {
				return err
			}
			if attempts == 1 {
				// Another client commits after this snapshot.
				if _, err := occ.Update(ctx, s, "d", func(d *occtest.Doc) error { d.Counter++; return nil }); err != nil {
					return err
				}
			}
			d.Counter++
			_, err = s.WithDB(tx).Update(ctx, d, v)
			if attempts == 1 && (!errors.Is(err, occ.ErrAborted) || !occ.IsRetryable(err) || errors.Is(err, occ.ErrConflict)) {
				t.Errorf("update after a concurrent commit: %v, want ErrAborted", err)
			}
			return err
		})
	})
	if err != nil || attempts != 2 {
		t.Fatalf("after %d attempts: %v", attempts, err)
	}
	if d, v, _ := s.Load(ctx, "d"); d.Counter != 2 || v != 3 {
		t.Fatalf("counter %d at %d, want 2 at 3", d.Counter, v)
	}
}
