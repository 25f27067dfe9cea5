package failover_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/replpair"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// resource is what the fences protect: a row per fence in a third
// database, written only with a fence at least as high as the highest it
// has seen (as fencedlock.Fence.Update does).
type resource struct {
	t    *testing.T
	pool *pgxpool.Pool
}

func newResource(t *testing.T) *resource {
	t.Helper()
	db := testdb.New(t)
	r := &resource{t: t, pool: db.Pool}
	if _, err := r.pool.Exec(t.Context(),
		`CREATE TABLE resource (fence text PRIMARY KEY, token bigint NOT NULL, writes int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, f := range fences() {
		if _, err := r.pool.Exec(t.Context(), `INSERT INTO resource VALUES ($1, 0, 0)`, f.String()); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// write reports whether the resource accepted a write fenced with token.
func (r *resource) write(f *fenceKind, token int64) bool {
	r.t.Helper()
	tag, err := r.pool.Exec(r.t.Context(),
		`UPDATE resource SET token = $2, writes = writes + 1 WHERE fence = $1 AND token <= $2`, f.String(), token)
	if err != nil {
		r.t.Fatal(err)
	}
	return tag.RowsAffected() == 1
}

// Test 2 of docs/failover.md: split brain. The old primary is isolated, not
// killed, and keeps minting on a session it had after the standby is
// promoted. A resource that has seen a fence from the new primary rejects
// every later write fenced by the old one; with the plain forms it accepts
// some, for every kind.
func TestSplitBrain(t *testing.T) {
	p := replpair.Get(t)
	setup(t, p)
	old := p.Primary()
	oldConn := p.Connect(p.URL(old)) // a client on the old primary's side
	mintAll(t, oldConn, 5)
	p.WaitReplayed()
	res := newResource(t)

	p.Isolate(old)
	// The old primary minted more than a sequence logs ahead before the
	// promotion, so its plain sequences are ahead of the new primary's.
	mintAll(t, oldConn, 40)
	p.Promote()
	newConn := p.Connect(p.MultiURL())
	if got, want := serverPort(t, newConn), nodePort(t, p, p.Primary()); got != want {
		t.Fatalf("the multi-host URL reached port %d, not the new primary's %d", got, want)
	}

	for _, f := range fences() {
		if token := mint(t, newConn, f); !res.write(f, token) {
			t.Fatalf("%v: the resource refused the new primary's first fence %d", f, token)
		}
	}
	accepted := map[*fenceKind]int{}
	for range 40 {
		for _, f := range fences() {
			if res.write(f, mint(t, oldConn, f)) {
				accepted[f]++
			}
		}
	}
	for _, f := range fences() {
		switch {
		case f.era && accepted[f] > 0:
			t.Errorf("%v: the resource accepted %d writes from the old primary after one from the new", f, accepted[f])
		case !f.era && accepted[f] == 0:
			t.Errorf("foil: %v: the resource accepted no write from the old primary: nothing was minted twice, the test proves nothing", f)
		default:
			t.Logf("%v: %d of 40 writes from the old primary accepted", f, accepted[f])
		}
	}
	checkDistinct(t, oldConn, newConn)
}

// checkDistinct asserts that the two primaries write on different timelines:
// only the timeline tells the branches apart.
func checkDistinct(t *testing.T, oldConn, newConn *pgx.Conn) {
	t.Helper()
	var oldEra, newEra int64
	if err := oldConn.QueryRow(t.Context(), eraSQL).Scan(&oldEra); err != nil {
		t.Fatal(err)
	}
	if err := newConn.QueryRow(t.Context(), eraSQL).Scan(&newEra); err != nil {
		t.Fatal(err)
	}
	if newEra <= oldEra {
		t.Errorf("the new primary mints in era %d, not above the old primary's %d", newEra, oldEra)
	}
}
