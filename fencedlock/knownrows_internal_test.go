package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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
