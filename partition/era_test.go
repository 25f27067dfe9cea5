package partition_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/partition"
)

// An installation of partition 001, which minted plain incarnations and
// epochs (incarnations past 2^40), carried over to fence eras: the first
// incarnation and the first epoch after the migration exceed every one
// before it, and a join of the previous version, prepared before the
// migration, fails afterwards instead of minting a plain incarnation.
func TestUpgradeToFenceEras(t *testing.T) {
	t.Parallel()
	var first []migrate.Migration
	for _, m := range partition.Migrations() {
		if m.Package == "partition" && m.Version == 1 {
			first = append(first, m)
		}
	}
	db := testdb.New(t, first...)
	old, err := pgx.Connect(ctx, db.URL) // caches its prepared statements
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(context.Background())
	const plainJoin = `INSERT INTO lockfree_partition_members (name, addr, ring, incarnation, joined_at, expires_at)
		VALUES ($1, '', 'r', nextval('lockfree_partition_incarnations'), now(), now() + interval '1 hour') RETURNING incarnation`
	var incarnation int64
	if _, err := old.Exec(ctx, `SELECT setval('lockfree_partition_incarnations', $1)`, 3*fence.EraSize); err != nil {
		t.Fatal(err)
	}
	if err := old.QueryRow(ctx, plainJoin, "old").Scan(&incarnation); err != nil {
		t.Fatal(err)
	}
	const before = 41 // partition 0's epoch, bumped by plain claims
	if _, err := old.Exec(ctx, `INSERT INTO lockfree_partition_owners VALUES (0, 'old', $1, now())`, before); err != nil {
		t.Fatal(err)
	}

	if err := migrate.Up(ctx, db.Pool, migrate.Names{}, partition.Migrations()); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := old.QueryRow(ctx, plainJoin, "again").Scan(new(int64)); !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Errorf("the previous version's join after the migration: %v, want SQLSTATE 42P01 (undefined table)", err)
	}
	m, err := newPostgres(t, db).Join(ctx, partition.MemberInfo{Name: "new", Ring: "r"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if m.Incarnation <= incarnation || m.Incarnation < fence.EraSize {
		t.Errorf("the first incarnation after the migration is %d: not an era fence above %d", m.Incarnation, incarnation)
	}
	store := newPostgres(t, db)
	again, err := store.Claim(ctx, "old", incarnation, []int{0})
	if err != nil || len(again) != 1 {
		t.Fatalf("claim after the migration: %v, %v", again, err)
	}
	if again[0].Token <= before || again[0].Token < fence.EraSize {
		t.Errorf("the first epoch after the migration is %d: not an era fence above %d", again[0].Token, before)
	}
}

// When the database's era goes back below one already minted in, Join and
// Claim fail with ErrFenceEra, naming the statement that moves fences on;
// on a read-only connection they fail with ErrFenceReadOnly.
func TestFenceErrors(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, partition.Migrations()...)
	store := newPostgres(t, db)
	m, err := store.Join(ctx, partition.MemberInfo{Name: "a", Ring: "r"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := pgx.Connect(ctx, db.URL+"&default_transaction_read_only=on")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close(context.Background())
	_, err = store.WithDB(ro).Join(ctx, partition.MemberInfo{Name: "b", Ring: "r"}, time.Hour)
	if !errors.Is(err, partition.ErrFenceReadOnly) || !strings.Contains(err.Error(), "target_session_attrs=read-write") {
		t.Errorf("Join on a read-only connection: %v, want ErrFenceReadOnly", err)
	}

	if _, err := db.Pool.Exec(ctx, `SELECT setval('lockfree_fence_eras', $1)`, m.Incarnation/fence.EraSize+5); err != nil {
		t.Fatal(err)
	}
	_, joinErr := store.Join(ctx, partition.MemberInfo{Name: "b", Ring: "r"}, time.Hour)
	_, claimErr := store.Claim(ctx, "a", m.Incarnation, []int{0, 1})
	for op, err := range map[string]error{"Join": joinErr, "Claim": claimErr} {
		var fenceErr *partition.FenceError
		if !errors.Is(err, partition.ErrFenceEra) || !errors.As(err, &fenceErr) ||
			!strings.Contains(err.Error(), `SELECT "lockfree_fence_advance"()`) {
			t.Errorf("%s with the era gone back: %v, want a *FenceError matching ErrFenceEra", op, err)
		}
		t.Logf("%s: %v", op, err)
	}
}
