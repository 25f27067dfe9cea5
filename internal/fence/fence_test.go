package fence_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
)

// These tests need one server, no replication: the limits of the fence
// functions, what they do when the era goes back, and the errors Check makes
// of their refusals. internal/failover runs them across real failovers.

// era returns the era a fence belongs to.
func era(v int64) int64 { return v >> fence.EraShift }

func r(sql string) string { return migrate.Render(sql, migrate.Names{}) }

func one(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var v int64
	if err := pool.QueryRow(t.Context(), r(sql), args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// sqlState returns the SQLSTATE of the error sql fails with, or "" when it
// succeeds.
func sqlState(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) string {
	t.Helper()
	_, err := pool.Exec(t.Context(), r(sql), args...)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		t.Logf("%s: %s (%s)", sql, pgErr.Message, pgErr.Code)
		return pgErr.Code
	}
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return ""
}

func newFenceDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db := testdb.New(t, fence.Migrations()...)
	if _, err := db.Pool.Exec(t.Context(), `CREATE SEQUENCE s AS bigint NO CYCLE`); err != nil {
		t.Fatal(err)
	}
	return db.Pool
}

// Past 2^40 the sequence carries into the era bits: tokens keep growing,
// nothing wraps. Past 2^63 - 1 minting fails (SQLSTATE 22003), and so does
// an era of 2^23 or more.
func TestMintLimits(t *testing.T) {
	pool := newFenceDB(t)
	e := one(t, pool, `SELECT {{fence_era}}()`)
	one(t, pool, `SELECT setval('s', $1)`, fence.EraSize-2)
	a := one(t, pool, `SELECT {{fence_mint}}('s')`)
	b := one(t, pool, `SELECT {{fence_mint}}('s')`)
	if a != e*fence.EraSize+fence.EraSize-1 || b != a+1 {
		t.Errorf("across 2^40: minted %d then %d, want %d then %d", a, b, e*fence.EraSize+fence.EraSize-1, e*fence.EraSize+fence.EraSize)
	}

	one(t, pool, `SELECT setval('s', $1)`, int64(1<<63-1)-e*fence.EraSize)
	if code := sqlState(t, pool, `SELECT {{fence_mint}}('s')`); code != "22003" {
		t.Errorf("a token past 2^63 - 1: SQLSTATE %q, want 22003", code)
	}

	if _, err := pool.Exec(t.Context(), r(`SELECT setval({{regclass fence_offset}}, $1::bigint - $2::bigint)`), int64(1)<<23, e); err != nil {
		t.Fatal(err)
	}
	if code := sqlState(t, pool, `SELECT {{fence_era}}()`); code != "22003" {
		t.Errorf("era 2^23: SQLSTATE %q, want 22003", code)
	}
	// Only a hand-made setval records era 2^23 (every writer of fence_eras
	// checks the limit first), and then the fast path returns it: the
	// mints still fail, on the multiplication.
	one(t, pool, `SELECT setval({{regclass fence_eras}}, $1)`, int64(1)<<23)
	for _, q := range []string{`SELECT {{fence_mint}}('s')`, `SELECT {{fence_next}}(1)`} {
		if code := sqlState(t, pool, q); code != "22003" {
			t.Errorf("%s with era 2^23 recorded: SQLSTATE %q, want 22003", q, code)
		}
	}
}

// fence_next jumps to the era's first epoch, counts within it, and refuses
// to leave it: the next epoch after the era's last one fails with 55000.
func TestNextWithinEra(t *testing.T) {
	pool := newFenceDB(t)
	e := one(t, pool, `SELECT {{fence_era}}()`)
	for _, c := range []struct{ prev, want int64 }{
		{0, e * fence.EraSize},
		{(e-1)*fence.EraSize + 12345, e * fence.EraSize},
		{e*fence.EraSize + 7, e*fence.EraSize + 8},
		{e*fence.EraSize + fence.EraSize - 2, e*fence.EraSize + fence.EraSize - 1},
	} {
		if got := one(t, pool, `SELECT {{fence_next}}($1)`, c.prev); got != c.want {
			t.Errorf("fence_next(%d) = %d, want %d", c.prev, got, c.want)
		}
	}
	if got := one(t, pool, `SELECT {{fence_next}}(NULL)`); got != e*fence.EraSize {
		t.Errorf("fence_next(NULL) = %d, want %d", got, e*fence.EraSize)
	}
	if code := sqlState(t, pool, `SELECT {{fence_next}}($1)`, e*fence.EraSize+fence.EraSize-1); code != "55000" {
		t.Errorf("fence_next of the era's last epoch: SQLSTATE %q, want 55000", code)
	}
}

// When the era goes below one already minted in — what a restore or an
// upgrade onto a cluster with a lower timeline leaves — minting fails
// (55000) until fence_advance, after which every fence exceeds every one
// minted before. TestRestoreOntoAnotherCluster does it for real.
func TestAdvance(t *testing.T) {
	pool := newFenceDB(t)
	e := one(t, pool, `SELECT {{fence_era}}()`)
	high := one(t, pool, `SELECT {{fence_mint}}('s')`)
	// As if era e+5 had been minted in before the timeline went back to e.
	one(t, pool, `SELECT setval({{regclass fence_eras}}, $1)`, e+5)
	for _, q := range []string{`SELECT {{fence_era}}()`, `SELECT {{fence_mint}}('s')`, `SELECT {{fence_next}}(1)`} {
		if code := sqlState(t, pool, q); code != "55000" {
			t.Errorf("%s with the timeline gone back: SQLSTATE %q, want 55000", q, code)
		}
	}
	if got := one(t, pool, `SELECT {{fence_advance}}()`); got != e+6 {
		t.Errorf("fence_advance() = %d, want era %d", got, e+6)
	}
	if got := one(t, pool, `SELECT {{fence_mint}}('s')`); got <= (e+5)*fence.EraSize+high || era(got) != e+6 {
		t.Errorf("after fence_advance minted %d (era %d), want era %d", got, era(got), e+6)
	}
	if got := one(t, pool, `SELECT {{fence_advance}}($1)`, e+100); got != e+101 {
		t.Errorf("fence_advance(%d) = %d, want %d", e+100, got, e+101)
	}
	if got := one(t, pool, `SELECT {{fence_next}}(5)`); got != (e+101)*fence.EraSize {
		t.Errorf("fence_next after fence_advance(%d) = %d, want %d", e+100, got, (e+101)*fence.EraSize)
	}
}

// BenchmarkMint compares the fence functions with the plain forms they
// replace.
// server/…: each operation mints 1000 values in one statement, and ns/mint
// is the server's time per value. statement/…: each operation is one
// committed UPDATE that mints, as a package's statement is.
func BenchmarkMint(b *testing.B) {
	db := testdb.New(b, fence.Migrations()...)
	if _, err := db.Pool.Exec(context.Background(), `CREATE SEQUENCE s AS bigint NO CYCLE`); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, expr string }{
		{"nextval", `nextval('s')`},
		{"fence_mint", `{{fence_mint}}('s')`},
		{"plus_one", `g + 1`},
		{"fence_next", `{{fence_next}}(g)`},
		{"fence_era", `{{fence_era}}() + g`},
	} {
		b.Run("server/"+c.name, func(b *testing.B) {
			sql := r(`SELECT max(` + c.expr + `) FROM generate_series(1, 1000) g`)
			for b.Loop() {
				if _, err := db.Pool.Exec(context.Background(), sql); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/mint")
		})
	}
}

func BenchmarkMintStatement(b *testing.B) {
	db := testdb.New(b, fence.Migrations()...)
	if _, err := db.Pool.Exec(context.Background(), `CREATE SEQUENCE s AS bigint NO CYCLE;
		CREATE TABLE locks (name text PRIMARY KEY, token bigint NOT NULL); INSERT INTO locks VALUES ('a', 0)`); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, expr string }{
		{"nextval", `nextval('s')`},
		{"fence_mint", `{{fence_mint}}('s')`},
		{"plus_one", `token + 1`},
		{"fence_next", `{{fence_next}}(token)`},
	} {
		b.Run(c.name, func(b *testing.B) {
			sql := r(`UPDATE locks SET token = ` + c.expr + ` WHERE name = 'a' RETURNING token`)
			var token int64
			for b.Loop() {
				if err := db.Pool.QueryRow(context.Background(), sql).Scan(&token); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEraServerTime breaks what minting in an era costs one statement
// down into its parts: the execution time PostgreSQL reports for each
// statement (EXPLAIN ANALYZE, without planning, commit or the round trip),
// median per statement, each a transaction of its own on its own connection,
// interleaved. select-1 is the floor; timeline reads the WAL timeline as
// fence_era does, last-value one recorded sequence value; era-unused is a
// fence_era in a branch that never runs: what an occurrence costs the
// statement's set-up alone.
//
//	go test -run '^$' -bench 'EraServerTime$' -benchtime 2000x -count 5 ./internal/fence/
func BenchmarkEraServerTime(b *testing.B) {
	db := testdb.New(b, fence.Migrations()...)
	if _, err := db.Pool.Exec(context.Background(), `CREATE SEQUENCE s AS bigint NO CYCLE`); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool.Exec(context.Background(), r(`SELECT {{fence_mint}}('s')`)); err != nil { // records the era
		b.Fatal(err)
	}
	stmts := []struct{ name, sql string }{
		{"select-1", `SELECT 1`},
		{"nextval", `SELECT nextval('s')`},
		{"timeline", `SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint`},
		{"last-value", `SELECT pg_sequence_last_value({{regclass fence_eras}})`},
		{"fence_era", `SELECT {{fence_era}}()`},
		{"era-unused", `SELECT CASE WHEN random() < 0 THEN {{fence_era}}() END`},
		{"fence_mint", `SELECT {{fence_mint}}('s')`},
	}
	conns := make([]*pgx.Conn, len(stmts))
	for i, st := range stmts {
		c, err := pgx.Connect(context.Background(), db.URL)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "PREPARE st AS "+r(st.sql)); err != nil {
			b.Fatal(st.name, err)
		}
		conns[i] = c
	}
	spent := make([][]float64, len(stmts))
	for n := 0; b.Loop(); n++ {
		for k := range stmts {
			i := (k + n) % len(stmts)
			var plan []struct {
				Time float64 `json:"Execution Time"`
			}
			err := conns[i].QueryRow(context.Background(), `EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) EXECUTE st`).Scan(&plan)
			if err != nil || len(plan) != 1 {
				b.Fatal(stmts[i].name, err)
			}
			spent[i] = append(spent[i], plan[0].Time*1000)
		}
	}
	for i, st := range stmts {
		slices.Sort(spent[i])
		b.ReportMetric(spent[i][len(spent[i])/2], st.name+"-server-µs")
	}
}

// Check makes typed errors of the fence functions' refusals — the era gone
// back, an epoch at the end of its era, a read-only server — and leaves
// every other error alone, 55000 from elsewhere included.
func TestCheck(t *testing.T) {
	pool := newFenceDB(t)
	e := one(t, pool, `SELECT {{fence_era}}()`)
	names := migrate.Names{Schema: "s", Prefix: "p_"}
	run := func(sql string, args ...any) error {
		t.Helper()
		_, err := pool.Exec(t.Context(), r(sql), args...)
		return fence.Check(err, names)
	}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"an epoch at the end of its era", run(`SELECT {{fence_next}}($1)`, e*fence.EraSize+fence.EraSize-1), fence.ErrEra},
		{"a read-only transaction", run(`BEGIN READ ONLY; SELECT {{fence_mint}}('s'); COMMIT`), fence.ErrReadOnly},
		{"currval before nextval (55000, not a fence function's)", run(`SELECT currval('s')`), nil},
		{"no error", run(`SELECT 1`), nil},
	} {
		var fenceErr *fence.Error
		switch {
		case c.want == nil && errors.As(c.err, &fenceErr):
			t.Errorf("%s: %v, want no *fence.Error", c.name, c.err)
		case c.want != nil && (!errors.Is(c.err, c.want) || !errors.As(c.err, &fenceErr)):
			t.Errorf("%s: %v, want a *fence.Error matching %v", c.name, c.err, c.want)
		case c.want == fence.ErrEra && fenceErr.Advance != `SELECT "s"."p_fence_advance"()`:
			t.Errorf("%s: Advance = %s, want the schema-qualified, prefixed name", c.name, fenceErr.Advance)
		}
		t.Logf("%s: %v", c.name, c.err)
	}

	one(t, pool, `SELECT setval({{regclass fence_eras}}, $1)`, e+5)
	err := run(`SELECT {{fence_mint}}('s')`)
	var pgErr *pgconn.PgError
	if !errors.Is(err, fence.ErrEra) || errors.Is(err, fence.ErrReadOnly) || !errors.As(err, &pgErr) || pgErr.Code != "55000" {
		t.Errorf("the era gone back: %v, want ErrEra unwrapping to the server's 55000", err)
	}
	t.Logf("the era gone back: %v", err)
}

// migrationsBefore returns the fence migrations below version v: the schema
// of an installation that predates migration v.
func migrationsBefore(v int) []migrate.Migration {
	var out []migrate.Migration
	for _, m := range fence.Migrations() {
		if m.Version < v {
			out = append(out, m)
		}
	}
	return out
}

// explainMint returns the expression PostgreSQL plans for a fence_mint call.
func explainMint(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var plan string
	if err := pool.QueryRow(t.Context(), r(`EXPLAIN (VERBOSE, COSTS OFF, FORMAT JSON) SELECT {{fence_mint}}('s')`)).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	return plan
}

// fence_mint and fence_era are inlined into the statement that mints: the
// plan evaluates the fast path's expression, and calls no function of ours
// but the checked path, in its CASE. A PL/pgSQL fence_era (migration 1, the
// foil) stays a call, which sets its expressions up again in every
// transaction.
func TestMintInlined(t *testing.T) {
	pool := newFenceDB(t)
	plan := explainMint(t, pool)
	if !strings.Contains(plan, "pg_is_in_recovery()") || strings.Contains(plan, `lockfree_fence_era()`) {
		t.Errorf("fence_mint is not inlined with the fast path of fence_era:\n%s", plan)
	}
	old := testdb.New(t, migrationsBefore(2)...)
	if _, err := old.Pool.Exec(t.Context(), `CREATE SEQUENCE s AS bigint NO CYCLE`); err != nil {
		t.Fatal(err)
	}
	if plan := explainMint(t, old.Pool); !strings.Contains(plan, `lockfree_fence_era()`) {
		t.Errorf("the check does not see migration 1's call of fence_era:\n%s", plan)
	}
}

// The fast path hands over to the checked path whenever the era it reads
// is not the one recorded: the first mint records its era, and an era that
// grows (here by the offset, as fence_advance raises it) is recorded again
// before anything is minted in it.
func TestEraRecorded(t *testing.T) {
	pool := newFenceDB(t)
	recorded := func() int64 {
		t.Helper()
		return one(t, pool, `SELECT coalesce(pg_sequence_last_value({{regclass fence_eras}}), -1)`)
	}
	if got := recorded(); got != -1 {
		t.Fatalf("an era is recorded before any mint: %d", got)
	}
	e := one(t, pool, `SELECT {{fence_era}}()`)
	if got := recorded(); got != e {
		t.Fatalf("after the first mint the recorded era is %d, want %d", got, e)
	}
	if got := one(t, pool, `SELECT {{fence_era}}()`); got != e {
		t.Fatalf("fence_era() = %d on the fast path, want %d", got, e)
	}
	one(t, pool, `SELECT setval({{regclass fence_offset}}, coalesce(pg_sequence_last_value({{regclass fence_offset}}), 0) + 3)`)
	if got := one(t, pool, `SELECT {{fence_mint}}('s')`); era(got) != e+3 || recorded() != e+3 {
		t.Errorf("after the offset grew by 3: minted in era %d, recorded %d, want %d", era(got), recorded(), e+3)
	}
}

// An installation at migration 1 carried to the fast path and back: no
// fence minted after either step is below one minted before it, and the
// era is the same on both paths.
func TestFastPathMigration(t *testing.T) {
	db := testdb.New(t, migrationsBefore(2)...)
	pool := db.Pool
	if _, err := pool.Exec(t.Context(), `CREATE SEQUENCE s AS bigint NO CYCLE`); err != nil {
		t.Fatal(err)
	}
	before := one(t, pool, `SELECT {{fence_mint}}('s')`)
	if err := migrate.Up(t.Context(), pool, migrate.Names{}, fence.Migrations()); err != nil {
		t.Fatal(err)
	}
	fast := one(t, pool, `SELECT {{fence_mint}}('s')`)
	var down string
	for _, m := range fence.Migrations() {
		if m.Version == 2 {
			down = m.Down
		}
	}
	if down == "" {
		t.Fatal("no down migration for version 2")
	}
	if _, err := pool.Exec(t.Context(), r(down)); err != nil {
		t.Fatal(err)
	}
	after := one(t, pool, `SELECT {{fence_mint}}('s')`)
	if !(before < fast && fast < after) || era(before) != era(fast) || era(fast) != era(after) {
		t.Errorf("minted %d (era %d), %d (era %d) on the fast path, %d (era %d) after the down migration: want increasing, one era",
			before, era(before), fast, era(fast), after, era(after))
	}
	if plan := explainMint(t, pool); !strings.Contains(plan, `lockfree_fence_era()`) {
		t.Errorf("after the down migration fence_era is still the SQL function:\n%s", plan)
	}
}
