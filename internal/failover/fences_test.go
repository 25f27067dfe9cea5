package failover_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/failover"
	"github.com/lockfree-go/lockfree/internal/testrepl"
	"github.com/lockfree-go/lockfree/migrate"
)

// A kind is one fence the project mints, modelled on the statement its
// package runs: an UPDATE that sets the fence and returns it, committed on
// its own.
type kind struct {
	name string
	seq  bool // a token from a sequence; else an epoch kept in a row
}

var kinds = []kind{
	{"fencedlock token", true},
	{"idempotency leased token", true},
	{"partition incarnation", true},
	{"partition epoch", false},
	{"singlewriter inbox epoch", false},
}

// A fence is a kind minted plain (nextval, prev + 1: what the packages do
// today) or through the prototype (fence_mint, fence_next).
type fence struct {
	kind
	era bool
}

func (f fence) String() string {
	if f.era {
		return f.name + " (era)"
	}
	return f.name + " (plain)"
}

// fences returns every kind in both forms.
func fences() []fence {
	var out []fence
	for _, k := range kinds {
		out = append(out, fence{k, false}, fence{k, true})
	}
	return out
}

func (f fence) table() string {
	name := "f_" + strings.ReplaceAll(f.name, " ", "_")
	if f.era {
		return name + "_era"
	}
	return name + "_plain"
}

func (f fence) create() string {
	sql := fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, value bigint NOT NULL);
		INSERT INTO %[1]s VALUES (1, 0);`, f.table())
	if f.seq {
		sql += fmt.Sprintf(`CREATE SEQUENCE %s_seq AS bigint NO CYCLE;`, f.table())
	}
	return sql
}

// mintSQL is the fence's minting statement.
func (f fence) mintSQL() string {
	var next string
	switch {
	case f.seq && f.era:
		next = fmt.Sprintf(`{{fence_mint}}('%s_seq')`, f.table())
	case f.seq:
		next = fmt.Sprintf(`nextval('%s_seq')`, f.table())
	case f.era:
		next = `{{fence_next}}(value)`
	default:
		next = `value + 1`
	}
	return migrate.Render(fmt.Sprintf(`UPDATE %s SET value = %s WHERE id = 1 RETURNING value`, f.table(), next), migrate.Names{})
}

// setup installs the prototype and every fence on the pair's primary, in the
// test's schema, and waits until the standby has them.
func setup(t *testing.T, p *testrepl.Pair) {
	t.Helper()
	conn := p.Connect(p.URL(p.Primary()))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := migrate.Up(ctx, conn, migrate.Names{}, failover.Migrations()); err != nil {
		t.Fatal(err)
	}
	for _, f := range fences() {
		if _, err := conn.Exec(ctx, f.create()); err != nil {
			t.Fatalf("%v: %v", f, err)
		}
	}
	p.WaitReplayed()
}

// minted is what each fence handed out, in order.
type minted map[fence][]int64

// mintAll mints every fence n times on conn, each mint committed on its own.
func mintAll(t *testing.T, conn *pgx.Conn, n int) minted {
	t.Helper()
	out := minted{}
	for range n {
		for _, f := range fences() {
			out[f] = append(out[f], mint(t, conn, f))
		}
	}
	return out
}

func mint(t *testing.T, conn *pgx.Conn, f fence) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var v int64
	if err := conn.QueryRow(ctx, f.mintSQL()).Scan(&v); err != nil {
		t.Fatalf("mint %v: %v", f, err)
	}
	return v
}

// serverPort returns the port of the server conn reached.
func serverPort(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var port int
	if err := conn.QueryRow(t.Context(), `SELECT inet_server_port()`).Scan(&port); err != nil {
		t.Fatal(err)
	}
	return port
}

// nodePort returns the port of node n, read through its own URL.
func nodePort(t *testing.T, p *testrepl.Pair, n testrepl.Node) int {
	t.Helper()
	return serverPort(t, p.Connect(p.URL(n)))
}

// era returns the era a fence belongs to.
func era(v int64) int64 { return v >> failover.EraShift }

// checkAfter asserts, for every fence, that everything minted after the
// failover exceeds everything minted before it in the era form, and (the
// foil, which shows the fault happened) that the plain form went back: some
// value minted after is at most one minted before.
func checkAfter(t *testing.T, before, after minted) {
	t.Helper()
	for _, f := range fences() {
		hiBefore, loAfter := slices.Max(before[f]), slices.Min(after[f])
		switch {
		case f.era && loAfter <= hiBefore:
			t.Errorf("%v went back across the failover: %d minted after, %d before (eras %d, %d)",
				f, loAfter, hiBefore, era(loAfter), era(hiBefore))
		case !f.era && loAfter > hiBefore:
			t.Errorf("foil: %v did not go back (%d minted after, %d before): no fence was lost, the test proves nothing",
				f, loAfter, hiBefore)
		default:
			t.Logf("%v: before up to %d, after from %d", f, hiBefore, loAfter)
		}
	}
}

var eraSQL = migrate.Render(`SELECT {{fence_era}}()`, migrate.Names{})

// eraMint mints from sequence SEQ through the prototype.
var eraMint = migrate.Render(`SELECT {{fence_mint}}('SEQ')`, migrate.Names{})
