package failover_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/internal/failover"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
)

// The migration proposed for each package that mints tokens from a
// sequence, shown for fencedlock (001_locks cut to what minting needs).
// The tokens move to a new sequence that starts where the old one stopped,
// and the old one is dropped, so that a process still running the previous
// version fails to mint instead of handing out plain tokens, which would be
// lower than the era tokens minted beside them.
const (
	lockBefore = `CREATE SEQUENCE {{lock_tokens}} AS bigint NO CYCLE;
		CREATE TABLE {{locks}} (name text PRIMARY KEY, token bigint NOT NULL);
		INSERT INTO {{locks}} VALUES ('a', 0);
		CREATE TABLE {{owners}} (partition int PRIMARY KEY, epoch bigint NOT NULL);
		INSERT INTO {{owners}} VALUES (0, 7)`
	lockEras = `-- The rename takes the sequence's lock: no nextval between the
		-- read of last_value and the drop.
		ALTER SEQUENCE {{lock_tokens}} RENAME TO {{bare lock_tokens_before_eras}};
		CREATE SEQUENCE {{lock_fences}} AS bigint NO CYCLE;
		SELECT setval({{regclass lock_fences}}, (SELECT last_value FROM {{lock_tokens_before_eras}}));
		DROP SEQUENCE {{lock_tokens_before_eras}}`
	acquireBefore = `UPDATE {{locks}} SET token = nextval({{regclass lock_tokens}}) WHERE name = 'a' RETURNING token`
	acquireEras   = `UPDATE {{locks}} SET token = {{fence_mint}}({{regclass lock_fences}}) WHERE name = 'a' RETURNING token`
	claimBefore   = `UPDATE {{owners}} SET epoch = epoch + 1 WHERE partition = 0 RETURNING epoch`
	claimEras     = `UPDATE {{owners}} SET epoch = {{fence_next}}(epoch) WHERE partition = 0 RETURNING epoch`
)

// An existing installation carried over: the first fence minted after the
// migration exceeds every one minted before it — tokens and epochs, even
// with a sequence already past 2^40 — and a statement of the previous
// version, prepared before the migration, fails afterwards.
func TestMigrateExistingInstallation(t *testing.T) {
	db := testdb.New(t)
	names := migrate.Names{Schema: db.Schema, Prefix: "lf_"}
	render := func(sql string) string { return migrate.Render(sql, names) }
	ctx := t.Context()
	if err := migrate.Up(ctx, db.Pool, names, []migrate.Migration{{Package: "fencedlock", Version: 1, Name: "locks", Up: lockBefore}}); err != nil {
		t.Fatal(err)
	}
	old, err := pgx.Connect(ctx, db.URL) // caches its prepared statements
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(context.Background())
	var token, epoch int64
	for range 100 {
		scan(t, old, render(acquireBefore), &token)
		scan(t, old, render(claimBefore), &epoch)
	}
	// An installation that has minted 3·2^40 tokens already.
	if _, err := old.Exec(ctx, render(`SELECT setval({{regclass lock_tokens}}, $1)`), 3*eraSize); err != nil {
		t.Fatal(err)
	}
	scan(t, old, render(acquireBefore), &token)

	ms := append(failover.Migrations(), migrate.Migration{Package: "fencedlock", Version: 2, Name: "fence_eras", Up: lockEras})
	if err := migrate.Up(ctx, db.Pool, names, ms); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := old.QueryRow(ctx, render(acquireBefore)).Scan(new(int64)); !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Errorf("the previous version's acquire after the migration: %v, want SQLSTATE 42P01 (undefined table)", err)
	}
	var newToken, newEpoch int64
	scan(t, old, render(acquireEras), &newToken)
	scan(t, old, render(claimEras), &newEpoch)
	if newToken <= token || newEpoch <= epoch {
		t.Errorf("across the migration: token %d then %d, epoch %d then %d", token, newToken, epoch, newEpoch)
	}
	t.Logf("across the migration: token %d then %d, epoch %d then %d", token, newToken, epoch, newEpoch)
}

func scan(t *testing.T, conn *pgx.Conn, sql string, dest *int64) {
	t.Helper()
	if err := conn.QueryRow(t.Context(), sql).Scan(dest); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
