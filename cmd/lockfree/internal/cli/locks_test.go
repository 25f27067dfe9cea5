package cli_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// `lockfree locks` lists the held locks of a database with their holders,
// tokens and values, in name order, and leaves out the released and the
// expired ones.
func TestLocks(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	store, err := fencedlock.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lead, err := store.AcquireValue(ctx, "leader/ledger", "node-a", time.Minute, "closing 2024-06")
	if err != nil {
		t.Fatal(err)
	}
	job, err := store.Acquire(ctx, "job/7", "node-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := store.Acquire(ctx, "job/8", "node-c", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Release(ctx, gone); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "locks", "--postgres", db.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") {
		t.Fatalf("want a header and 2 locks:\n%s", out)
	}
	for i, want := range [][]string{{`"job/7"`, `"node-b"`, strconv.FormatInt(job.Token, 10), `""`},
		{`"leader/ledger"`, `"node-a"`, strconv.FormatInt(lead.Token, 10), `"closing 2024-06"`}} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("line %q lacks %s", lines[i+1], w)
			}
		}
	}
	if strings.Contains(out, "job/8") {
		t.Errorf("a released lock is listed:\n%s", out)
	}

	code, out, errs = run(t, "locks", "--postgres", db.URL, "--names", "leader/", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var row map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &row); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if row["name"] != "leader/ledger" || row["holder"] != "node-a" || row["value"] != "closing 2024-06" || row["token"] != float64(lead.Token) {
		t.Errorf("JSON %v", row)
	}
	for _, k := range []string{"since", "expires"} {
		if _, err := time.Parse(time.RFC3339Nano, row[k].(string)); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
}

// `lockfree locks --limit` pages through the lock table and says when it
// left locks out.
func TestLocksLimit(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, fencedlock.Migrations()...)
	store, err := fencedlock.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := store.Acquire(context.Background(), "job/"+strconv.Itoa(i), "node", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := run(t, "locks", "--postgres", db.URL, "--limit", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if n := strings.Count(out, `"node"`); n != 3 || !strings.Contains(out, "more locks held") {
		t.Fatalf("want 3 locks and a note of more:\n%s", out)
	}
}

// Bad flags are usage errors, refused before the database is reached.
func TestLocksRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"locks", "--postgres", ""},
		{"locks", "--postgres", "postgres://nowhere.invalid/x", "--limit", "0"},
		{"locks", "--postgres", "postgres://nowhere.invalid/x", "--prefix", "bad prefix;"},
		{"locks", "--postgres", "postgres://nowhere.invalid/x", "extra"},
	} {
		if code, _, errs := run(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2: %s", args, code, errs)
		}
	}
}
