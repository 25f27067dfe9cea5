package partition_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/partition"
)

// A write guarded by Condition lands while its epoch is current and changes
// nothing once another member has claimed the partition.
func TestConditionFencesOneStatementWrites(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, partition.Migrations()...)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE counters (id text PRIMARY KEY, n bigint NOT NULL);
		INSERT INTO counters VALUES ('c', 0)`); err != nil {
		t.Fatal(err)
	}
	store, err := partition.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	claim := func(name string, ttl time.Duration) partition.Epoch {
		t.Helper()
		m, err := store.Join(ctx, partition.MemberInfo{Name: name, Addr: name + ":80", Ring: "r"}, ttl)
		if err != nil {
			t.Fatal(err)
		}
		var es []partition.Epoch
		waitFor(t, 30*time.Second, func() bool {
			es, err = store.Claim(ctx, m.Name, m.Incarnation, []int{7})
			return err == nil && len(es) == 1
		})
		return es[0]
	}
	write := func(e partition.Epoch) int64 {
		t.Helper()
		cond, args := store.Condition(e, 2)
		tag, err := db.Pool.Exec(ctx, `UPDATE counters SET n = n + 1 WHERE id = $1 AND `+cond, append([]any{"c"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return tag.RowsAffected()
	}
	a := claim("a", 300*time.Millisecond)
	if n := write(a); n != 1 {
		t.Fatalf("write with the current epoch changed %d rows", n)
	}
	// a stops heartbeating; b claims the partition once a's lease expires.
	b := claim("b", time.Minute)
	if b.Token <= a.Token {
		t.Fatalf("epoch %d after %d", b.Token, a.Token)
	}
	if n := write(a); n != 0 {
		t.Fatal("a write with the stale epoch landed")
	}
	if err := store.Check(ctx, a); !errors.Is(err, partition.ErrStaleEpoch) {
		t.Fatalf("Check(stale) = %v, want ErrStaleEpoch", err)
	}
	if n := write(b); n != 1 {
		t.Fatal("the new owner's write did not land")
	}
	var n int64
	db.Pool.QueryRow(ctx, `SELECT n FROM counters`).Scan(&n)
	if n != 2 {
		t.Fatalf("n = %d, want 2", n)
	}
}
