package failover_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/replpair"
	"github.com/lockfree-go/lockfree/leader"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/partition"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// db is what a fence is minted on: *pgx.Conn and pgx.Tx satisfy it, and it
// satisfies the DB interface of every package's Postgres backend.
type db interface {
	fencedlock.DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// A fenceKind is one number lockfree hands out as a fence, minted as its
// package mints it (era: through fence eras), or one of the foils, minted
// the plain way the packages did before (nextval, prev + 1), which shows
// that the fault the test makes did happen.
type fenceKind struct {
	name string
	era  bool
	// mint mints one fence on db and returns it, committed when db is a
	// connection.
	mint func(ctx context.Context, db db) (int64, error)
}

func (f *fenceKind) String() string { return f.name }

// The plain forms, on tables of the test's own (setup creates them): one
// token from a sequence and one epoch kept in a row.
const (
	createPlain = `CREATE SEQUENCE plain_tokens AS bigint NO CYCLE;
		CREATE TABLE plain_epochs (id int PRIMARY KEY, epoch bigint NOT NULL);
		INSERT INTO plain_epochs VALUES (1, 0);`
	mintPlainToken = `SELECT nextval('plain_tokens')`
	mintPlainEpoch = `UPDATE plain_epochs SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch`
	// A sequence that TestEraAtPromotion mints from with fence_mint.
	createProbe = `CREATE SEQUENCE probe_tokens AS bigint NO CYCLE;`
)

// lockNames makes every fencedlock acquire one of a fresh name, which mints.
var lockNames atomic.Int64

var (
	plainToken = &fenceKind{name: "plain token (foil)", mint: scalarMint(mintPlainToken)}
	plainEpoch = &fenceKind{name: "plain epoch (foil)", mint: scalarMint(mintPlainEpoch)}
	lockToken  = &fenceKind{name: "fencedlock token", era: true, mint: func(ctx context.Context, db db) (int64, error) {
		store, err := fencedlock.NewPostgres(db, nil)
		if err != nil {
			return 0, err
		}
		l, err := store.Acquire(ctx, fmt.Sprintf("lock-%d", lockNames.Add(1)), "failover", time.Hour)
		return l.Token, err
	}}
	// An election of a fresh name mints its first term: a fencedlock token
	// granted with a value (AcquireValue's statements). The term is resigned
	// before its first renewal, which would share db with the mint.
	leaderTerm = &fenceKind{name: "leader term", era: true, mint: func(ctx context.Context, db db) (int64, error) {
		store, err := fencedlock.NewPostgres(db, nil)
		if err != nil {
			return 0, err
		}
		e, err := leader.NewElection(store, fmt.Sprintf("election-%d", lockNames.Add(1)), &leader.Config{TTL: time.Hour})
		if err != nil {
			return 0, err
		}
		term, err := e.Campaign(ctx, "failover")
		if err != nil {
			return 0, err
		}
		return term.Token(), term.Resign(ctx)
	}}
	// A leased-mode claim of a fresh key mints a token.
	leasedToken = &fenceKind{name: "idempotency leased token", era: true, mint: func(ctx context.Context, db db) (int64, error) {
		store, err := idempotency.NewPostgres(db, nil)
		if err != nil {
			return 0, err
		}
		key := idempotency.Key{ID: fmt.Sprintf("key-%d", leasedKeys.Add(1))}
		l, _, err := store.Claim(ctx, key, idempotency.NewFingerprint([]byte("failover")), time.Hour)
		return l.Token, err
	}}
	// A claim of inbox partition 0 bumps its epoch.
	inboxEpoch = &fenceKind{name: "kafkawriter inbox epoch", era: true, mint: func(ctx context.Context, db db) (int64, error) {
		inbox, err := kafkawriter.NewInbox(db, nil)
		if err != nil {
			return 0, err
		}
		c, err := inbox.Claim(ctx, "group", "topic", 0, "failover", kafka.FirstOffset)
		return c.Epoch, err
	}}
	// A Join of a fresh name mints an incarnation.
	partitionIncarnation = &fenceKind{name: "partition incarnation", era: true, mint: func(ctx context.Context, db db) (int64, error) {
		store, err := partition.NewPostgres(db, nil)
		if err != nil {
			return 0, err
		}
		m, err := store.Join(ctx, partition.MemberInfo{Name: fmt.Sprintf("member-%d", memberNames.Add(1)), Ring: "r"}, time.Hour)
		return m.Incarnation, err
	}}
	// A claim of partition 0 by the member setup joined, its owner, bumps
	// its epoch.
	partitionEpoch = &fenceKind{name: "partition epoch", era: true, mint: func(ctx context.Context, db db) (int64, error) {
		store, err := partition.NewPostgres(db, nil)
		if err != nil {
			return 0, err
		}
		es, err := store.Claim(ctx, claimer, claimerIncarnation.Load(), []int{0})
		if err == nil && len(es) != 1 {
			err = fmt.Errorf("claim of partition 0 by its owner took %v", es)
		}
		if err != nil {
			return 0, err
		}
		return es[0].Token, nil
	}}
)

var memberNames, leasedKeys atomic.Int64

// claimer is the partition member that claims partition 0 again and again;
// setup joins it, with an hour's lease.
const claimer = "claimer"

var claimerIncarnation atomic.Int64

// fences returns every fence the tests mint: every package's, through its
// own API, and the foils.
func fences() []*fenceKind {
	return []*fenceKind{plainToken, plainEpoch, lockToken, leaderTerm, partitionIncarnation, partitionEpoch, leasedToken, inboxEpoch}
}

// migrations is the schema of every package whose fences the tests mint.
func migrations() [][]migrate.Migration {
	return [][]migrate.Migration{fencedlock.Migrations(), partition.Migrations(), idempotency.Migrations(), kafkawriter.Migrations()}
}

// scalarMint mints with a statement that returns the fence, and types its
// errors as a package does.
func scalarMint(sql string) func(context.Context, db) (int64, error) {
	sql = migrate.Render(sql, migrate.Names{})
	return func(ctx context.Context, db db) (int64, error) {
		var v int64
		err := db.QueryRow(ctx, sql).Scan(&v)
		return v, fence.Check(err, migrate.Names{})
	}
}

// setup installs every package's schema and the plain forms on the pair's
// primary, in the test's schema, and waits until the standby has them.
func setup(t *testing.T, p *replpair.Test) {
	t.Helper()
	conn := p.Connect(p.URL(p.Primary()))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := migrate.Up(ctx, conn, migrate.Names{}, migrations()...); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, createPlain+createProbe); err != nil {
		t.Fatal(err)
	}
	store, err := partition.NewPostgres(conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := store.Join(ctx, partition.MemberInfo{Name: claimer, Ring: "r"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	claimerIncarnation.Store(m.Incarnation)
	p.WaitReplayed()
}

// minted is what each fence handed out, in order.
type minted map[*fenceKind][]int64

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

func mint(t *testing.T, conn *pgx.Conn, f *fenceKind) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	v, err := f.mint(ctx, conn)
	if err != nil {
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
func nodePort(t *testing.T, p *replpair.Test, n replpair.Node) int {
	t.Helper()
	return serverPort(t, p.Connect(p.URL(n)))
}

// era returns the era a fence belongs to.
func era(v int64) int64 { return v >> fence.EraShift }

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

// eraMint mints from sequence SEQ through fence_mint.
var eraMint = migrate.Render(`SELECT {{fence_mint}}('SEQ')`, migrate.Names{})
