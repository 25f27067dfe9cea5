package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/testdb"
)

// statementLog is a DB that records the acquire statements sent through it.
type statementLog struct {
	DB
	names map[string]string // statement → what the log calls it
	mu    sync.Mutex
	sent  []string
}

func (s *statementLog) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if name, ok := s.names[sql]; ok {
		s.mu.Lock()
		s.sent = append(s.sent, name)
		s.mu.Unlock()
	}
	return s.DB.QueryRow(ctx, sql, args...)
}

func (s *statementLog) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	sent := s.sent
	s.sent = nil
	return sent
}

// Acquire sends sqlAcquire, and sqlAcquireInsert only when it took nothing:
// a fresh name, one whose row was purged (its token still above every
// earlier one), or a held name, whose holder the second statement reports.
// The held row is neither written nor locked (xmax stays 0).
func TestAcquireStatements(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t, Migrations()...)
	owner, err := NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	log := &statementLog{DB: db.Pool}
	p, err := NewPostgres(log, nil)
	if err != nil {
		t.Fatal(err)
	}
	log.names = map[string]string{p.sql.acquire: "acquire", p.sql.acquireInsert: "insert"}
	var last int64
	step := func(what, name string, want []string) Lease {
		t.Helper()
		l, err := p.Acquire(ctx, name, "p", time.Minute)
		if err != nil || l.Holder != "p" || l.Token <= last {
			t.Fatalf("%s: %+v, %v; want a lease for p with a token above %d", what, l, err, last)
		}
		last = l.Token
		if sent := log.take(); !slices.Equal(sent, want) {
			t.Errorf("%s sent %v, want %v", what, sent, want)
		}
		return l
	}
	first := step("a fresh name", "n", []string{"acquire", "insert"})
	if err := p.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	second := step("a free row", "n", []string{"acquire"})
	if err := p.Release(ctx, second); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM lockfree_locks WHERE name = 'n'`); err != nil {
		t.Fatal(err)
	}
	step("a purged row", "n", []string{"acquire", "insert"})

	held, err := owner.Acquire(ctx, "held", "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	log.take()
	_, err = p.Acquire(ctx, "held", "p", time.Minute)
	var he *HeldError
	if !errors.As(err, &he) || he.Holder != "owner" || he.Token != held.Token {
		t.Fatalf("acquire of a held name: %v; want held by owner with token %d", err, held.Token)
	}
	if sent := log.take(); !slices.Equal(sent, []string{"acquire", "insert"}) {
		t.Errorf("acquire of a held name sent %v, want [acquire insert]", sent)
	}
	var xmax string
	if err := db.Pool.QueryRow(ctx, `SELECT xmax::text FROM lockfree_locks WHERE name = 'held'`).Scan(&xmax); err != nil {
		t.Fatal(err)
	}
	if xmax != "0" {
		t.Errorf("the refused acquire locked the holder's row (xmax %s)", xmax)
	}
}

// TestInsertFindingARowMintsNothing holds sqlAcquireInsert to minting only
// for a name that has no row: an INSERT computes its values before it finds
// its conflict, so without its guard an insert racing a row that appeared
// after the first statement would use up a token. It answers the holder
// instead, and the next mint is the one right after the last grant.
func TestInsertFindingARowMintsNothing(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t, Migrations()...)
	p, err := NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	held, err := p.Acquire(ctx, "held", "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		_, err = p.attempt(ctx, p.sql.acquireInsert, grant{name: "held", holder: fmt.Sprint("other-", i), ttl: time.Minute})
		var he *HeldError
		if !errors.As(err, &he) || he.Holder != "owner" {
			t.Fatalf("the insert of a held name: %v, want held by owner", err)
		}
	}
	next, err := p.Acquire(ctx, "other", "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token != held.Token+1 {
		t.Errorf("the next mint is %d, want %d: the inserts that found a row used up tokens", next.Token, held.Token+1)
	}
}
