package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/testdb"
)

func TestKnownRows(t *testing.T) {
	k := newKnownRows()
	if k.has("a") {
		t.Fatal("an empty table knows a name")
	}
	k.add("a")
	if !k.has("a") {
		t.Fatal("an added name is not known")
	}
	k.forget("a")
	if k.has("a") {
		t.Fatal("a forgotten name is still known")
	}
	// A name that maps to a taken slot evicts its owner; forgetting the
	// evicted name leaves the new owner alone.
	k.add("a")
	s, _ := k.slot("a")
	var other string
	for i := 0; ; i++ {
		other = fmt.Sprint("b", i)
		if o, _ := k.slot(other); o == s {
			break
		}
	}
	k.add(other)
	k.forget("a")
	if k.has("a") || !k.has(other) {
		t.Errorf("after %s took a's slot: a known %v, %s known %v", other, k.has("a"), other, k.has(other))
	}
}

// A name whose row the store has seen is acquired with the statement that
// has no fresh-row branch; when its row is gone (purged), that statement
// finds nothing and the acquire goes on with the full one: the token still
// exceeds every earlier one. A refused acquire also marks the row as seen.
func TestAcquireKnownRow(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t, Migrations()...)
	p, err := NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.Acquire(ctx, "n", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !p.known.has("n") {
		t.Fatal("an acquired name's row is not known")
	}
	if err := p.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	second, err := p.Acquire(ctx, "n", "a", time.Minute)
	if err != nil || second.Token <= first.Token {
		t.Fatalf("acquire of a known row: %+v, %v; want a token above %d", second, err, first.Token)
	}
	if err := p.Release(ctx, second); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM lockfree_locks WHERE name = 'n'`); err != nil {
		t.Fatal(err)
	}
	third, err := p.Acquire(ctx, "n", "a", time.Minute)
	if err != nil || third.Token <= second.Token {
		t.Fatalf("acquire of a known name whose row was purged: %+v, %v; want a token above %d", third, err, second.Token)
	}
	if !p.known.has("n") {
		t.Error("the re-inserted row is not known")
	}

	other, err := NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, "n", "b", time.Minute); !errors.Is(err, ErrHeld) || !other.known.has("n") {
		t.Errorf("a refused acquire: %v, known %v; want ErrHeld and the row known", err, other.known.has("n"))
	}
}

func TestInsertFirst(t *testing.T) {
	var f insertFirst
	if !f.insert() {
		t.Fatal("a zero insertFirst does not send the insert")
	}
	f.record(false)
	if f.insert() {
		t.Fatal("after an existing row it still sends the insert")
	}
	f.record(true)
	if !f.insert() {
		t.Fatal("after as many fresh names as existing rows it does not send the insert")
	}
	// Bounded: a long run of existing rows is undone by insertFirstBound
	// fresh names.
	for range 3 * insertFirstBound {
		f.record(false)
	}
	for range insertFirstBound {
		f.record(true)
	}
	if !f.insert() {
		t.Errorf("score %d after a long run of existing rows and %d fresh names; want the insert", f.score.Load(), insertFirstBound)
	}
}

// A store that has not seen a name's row acquires a fresh name with the
// insert alone, and an existing row, free or held, with a second statement
// that takes it or reports its holder; with the full statement, in one
// statement in every case. Either way the token exceeds every earlier one,
// a held row is refused without being locked (xmax stays 0: the refusal
// writes nothing), and the row is known after.
func TestAcquireUnseenName(t *testing.T) {
	ctx := context.Background()
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprint("full=", full), func(t *testing.T) {
			db := testdb.New(t, Migrations()...)
			owner, err := NewPostgres(db.Pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			freed, err := owner.Acquire(ctx, "free", "owner", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := owner.Release(ctx, freed); err != nil {
				t.Fatal(err)
			}
			held, err := owner.Acquire(ctx, "held", "owner", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			log := &statementLog{DB: db.Pool}
			p, err := NewPostgres(log, nil)
			if err != nil {
				t.Fatal(err)
			}
			log.names = map[string]string{p.sql.acquireUpdate: "update", p.sql.acquireRow: "row", p.sql.acquire: "full", p.sql.acquireInsert: "insert"}
			want := map[string][]string{"fresh": {"insert"}, "free": {"insert", "row"}, "held": {"insert", "row"}}
			if full {
				p.unseen.score.Store(insertFirstBound)
				want = map[string][]string{"fresh": {"full"}, "free": {"full"}, "held": {"full"}}
			}
			for _, name := range []string{"fresh", "free"} {
				l, err := p.Acquire(ctx, name, "p", time.Minute)
				if err != nil || l.Holder != "p" || l.Token <= held.Token {
					t.Fatalf("acquire of %s: %+v, %v; want a lease for p with a token above %d", name, l, err, held.Token)
				}
				if sent := log.take(); !slices.Equal(sent, want[name]) {
					t.Errorf("acquire of %s sent %v, want %v", name, sent, want[name])
				}
				if !p.known.has(name) {
					t.Errorf("%s's row is not known after its acquire", name)
				}
			}
			_, err = p.Acquire(ctx, "held", "p", time.Minute)
			var he *HeldError
			if !errors.As(err, &he) || he.Holder != "owner" || he.Token != held.Token {
				t.Fatalf("acquire of a held name: %v; want held by owner with token %d", err, held.Token)
			}
			if sent := log.take(); !slices.Equal(sent, want["held"]) {
				t.Errorf("acquire of held sent %v, want %v", sent, want["held"])
			}
			if !p.known.has("held") {
				t.Error("a refused name's row is not known")
			}
			var xmax string
			if err := db.Pool.QueryRow(ctx, `SELECT xmax::text FROM lockfree_locks WHERE name = 'held'`).Scan(&xmax); err != nil {
				t.Fatal(err)
			}
			if xmax != "0" {
				t.Errorf("the refused acquire locked the holder's row (xmax %s)", xmax)
			}
		})
	}
}

// A store whose unseen names turn out to have rows switches to the
// statement that takes or refuses them in one round trip, and back once
// fresh names come again.
func TestAcquireUnseenNameSwitches(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t, Migrations()...)
	owner, err := NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"free-1", "free-2"} {
		l, err := owner.Acquire(ctx, name, "owner", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := owner.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	p, err := NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	step := func(name string, wantInsert bool) {
		t.Helper()
		if _, err := p.Acquire(ctx, name, "p", time.Minute); err != nil {
			t.Fatalf("acquire of %s: %v", name, err)
		}
		if p.unseen.insert() != wantInsert {
			t.Fatalf("after %s: insert first %v, want %v (score %d)", name, !wantInsert, wantInsert, p.unseen.score.Load())
		}
	}
	step("free-1", false) // a free row: the full statement next
	step("free-2", false) // taken by the full statement: still full
	step("fresh-1", false)
	step("fresh-2", true) // as many fresh names as free rows: the insert again
}

func TestHeldFirst(t *testing.T) {
	var f heldFirst
	if f.held() {
		t.Fatal("a zero heldFirst does not send the update first")
	}
	f.record(true)
	if !f.held() {
		t.Fatal("after a held row it still sends the update first")
	}
	for range heldFirstWeight - 1 {
		f.record(false)
	}
	if !f.held() {
		t.Fatalf("after a held row and %d free ones it sends the update first", heldFirstWeight-1)
	}
	f.record(false)
	if f.held() {
		t.Fatalf("after a held row and %d free ones it does not send the update first", heldFirstWeight)
	}
	// Bounded: a long run of held rows is undone by heldFirstBound free
	// ones.
	for range 3 * heldFirstBound {
		f.record(true)
	}
	for range heldFirstBound {
		f.record(false)
	}
	if f.held() {
		t.Errorf("score %d after a long run of held rows and %d free ones; want the update first", f.score.Load(), heldFirstBound)
	}
}

// statementLog is a DB that records the acquire statements sent through it
// and runs before, when set, ahead of each.
type statementLog struct {
	DB
	names  map[string]string // statement → what the log calls it
	sent   []string
	before func(name string)
}

func (s *statementLog) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if name, ok := s.names[sql]; ok {
		if s.before != nil {
			s.before(name)
		}
		s.sent = append(s.sent, name)
	}
	return s.DB.QueryRow(ctx, sql, args...)
}

// take returns the statements sent since the last take.
func (s *statementLog) take() []string {
	sent := s.sent
	s.sent = nil
	return sent
}

// A name whose row the store has seen is acquired with the update alone
// while such rows turn out free: one statement. A held row takes a second
// statement, which reports the holder, and makes the store send that
// statement first: one statement for the next held row, and for a free
// one, until free rows outweigh the held ones (a held row weighs
// heldFirstWeight) and the update goes first again. A refusal locks nothing on
// either path, and a lock freed between the update and the second statement
// is taken by the second.
func TestAcquireSeenRow(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t, Migrations()...)
	owner, err := NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	log := &statementLog{DB: db.Pool, names: map[string]string{}}
	p, err := NewPostgres(log, nil)
	if err != nil {
		t.Fatal(err)
	}
	log.names = map[string]string{p.sql.acquireUpdate: "update", p.sql.acquireRow: "row", p.sql.acquire: "full", p.sql.acquireInsert: "insert"}
	var last int64
	hold := func(name, holder string) Lease {
		t.Helper()
		l, err := owner.Acquire(ctx, name, holder, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	step := func(name string, wantHeld bool, wantSent []string, wantHeldFirst bool) Lease {
		t.Helper()
		l, err := p.Acquire(ctx, name, "p", time.Minute)
		var he *HeldError
		switch {
		case wantHeld && !errors.As(err, &he):
			t.Fatalf("acquire of held %s: %+v, %v; want a HeldError", name, l, err)
		case !wantHeld && (err != nil || l.Holder != "p" || l.Token <= last):
			t.Fatalf("acquire of free %s: %+v, %v; want a lease for p with a token above %d", name, l, err, last)
		case !wantHeld:
			last = l.Token
		}
		if sent := log.take(); !slices.Equal(sent, wantSent) {
			t.Errorf("acquire of %s sent %v, want %v", name, sent, wantSent)
		}
		if p.seen.held() != wantHeldFirst {
			t.Errorf("after %s: held first %v, want %v (score %d)", name, !wantHeldFirst, wantHeldFirst, p.seen.score.Load())
		}
		if wantHeld {
			var xmax string
			if err := db.Pool.QueryRow(ctx, `SELECT xmax::text FROM lockfree_locks WHERE name = $1`, name).Scan(&xmax); err != nil {
				t.Fatal(err)
			}
			if xmax != "0" {
				t.Errorf("the refused acquire of %s locked the holder's row (xmax %s)", name, xmax)
			}
		}
		return l
	}
	release := func(l Lease) {
		t.Helper()
		if err := p.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		release(step(name, false, []string{"insert"}, false)) // fresh: the row is seen now
	}
	last = hold("held-1", "owner").Token
	_ = hold("held-2", "owner")
	for _, name := range []string{"held-1", "held-2"} {
		if _, err := p.Acquire(ctx, name, "p", time.Minute); !errors.Is(err, ErrHeld) {
			t.Fatalf("first acquire of %s: %v, want ErrHeld", name, err)
		}
	}
	p.seen.score.Store(0)
	log.take()

	step("held-1", true, []string{"update", "row"}, true) // held: the update takes nothing
	step("held-2", true, []string{"row"}, true)           // held first: one statement
	// Free rows, taken by the held-first statement, until they outweigh
	// the held ones.
	for i := heldFirstBound; i > 0; i-- {
		release(step("b", false, []string{"row"}, i > 1))
	}
	release(step("a", false, []string{"update"}, false)) // the update first again

	// A lock freed between the update and the second statement is taken by
	// the second.
	freed := hold("freed", "owner")
	if _, err := p.Acquire(ctx, "freed", "p", time.Minute); !errors.Is(err, ErrHeld) {
		t.Fatalf("first acquire of freed: %v, want ErrHeld", err)
	}
	p.seen.score.Store(0)
	log.take()
	log.before = func(stmt string) {
		if stmt == "row" {
			if err := owner.Release(ctx, freed); err != nil {
				t.Fatal(err)
			}
		}
	}
	step("freed", false, []string{"update", "row"}, true)
}

// TestInsertFindingARowMintsNothing holds sqlAcquireInsert to minting only
// for a name that has no row: an INSERT computes its values before it finds
// its conflict, so without its guard every unseen name that has a row, held
// or free, would use up a token. The next mint after such attempts is the
// one right after the last grant.
func TestInsertFindingARowMintsNothing(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t, Migrations()...)
	owner, err := NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	held, err := owner.Acquire(ctx, "held", "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		p, err := NewPostgres(db.Pool, nil) // a store that has not seen the row
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = p.attempt(ctx, p.sql.acquireInsert, grant{name: "held", holder: fmt.Sprint("other-", i), ttl: time.Minute})
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("the insert of a name with a row: %v, want no row", err)
		}
	}
	next, err := owner.Acquire(ctx, "other", "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token != held.Token+1 {
		t.Errorf("the next mint is %d, want %d: the inserts that found a row used up tokens", next.Token, held.Token+1)
	}
}
