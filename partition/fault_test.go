package partition_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testproc"
	"github.com/lockfree-go/lockfree/partition"
)

const accountsDDL = `CREATE TABLE accounts (
	id    text PRIMARY KEY,
	owner text NOT NULL,
	seq   bigint NOT NULL DEFAULT 0
);
INSERT INTO accounts (id, owner) VALUES ('acct', 'nobody')`

// pgWrite is the write of the pause tests: with fenced set it proves the
// epoch inside the transaction (Postgres.Verify), otherwise it writes
// blindly, as a member that trusts its ownership would.
func pgWrite(ctx context.Context, pool *pgxpool.Pool, store *partition.Postgres, e partition.Epoch, who string, fenced bool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if fenced {
			if err := store.Verify(ctx, tx, e); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET owner = $1, seq = seq + 1 WHERE id = 'acct'`, who)
		return err
	})
}

// pausedMember is the child process of TestStoppedMemberIsFenced: it joins
// the fleet alone, runs a call for "acct", reports its epoch, and writes when
// told to — after its parent has stopped it past its lease and resumed it.
func pausedMember(in *bufio.Scanner, out io.Writer) error {
	pool, err := pgxpool.New(ctx, os.Getenv("CHILD_DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := partition.NewPostgres(pool, nil)
	if err != nil {
		return err
	}
	cfg := testConfig
	cfg.Name = "child"
	m, err := partition.NewMember(store, &cfg)
	if err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	fenced := os.Getenv("CHILD_FENCED") == "true"
	// doOwned: a heartbeat late on a loaded machine makes the member refuse
	// for a moment.
	return doOwned(m, "acct", func(_ context.Context, e partition.Epoch) error {
		fmt.Fprintf(out, "epoch %d\n", e.Token)
		if !in.Scan() || in.Text() != "write" {
			return errors.New("expected a write command")
		}
		// The write ignores the call's context: a zombie whose write is
		// already on its way does not look at it either.
		err := pgWrite(context.Background(), pool, store, e, "child", fenced)
		var se *partition.StaleEpochError
		switch {
		case errors.As(err, &se):
			fmt.Fprintf(out, "result fenced %s %d\n", se.Owner, se.Required)
		case err != nil:
			return err
		default:
			fmt.Fprintln(out, "result written")
		}
		return nil
	})
}

// A member is stopped with SIGSTOP in the middle of a call, past its lease;
// its partitions move to another member, which writes; the stopped member is
// resumed and writes with its old epoch: the fenced write is rejected, the
// naive one lands over the new owner's (which shows the pause was real).
func TestStoppedMemberIsFenced(t *testing.T) {
	t.Parallel()
	for _, fenced := range []bool{true, false} {
		t.Run(map[bool]string{true: "fenced write rejected", false: "naive write lands"}[fenced], func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t, partition.Migrations()...)
			if _, err := db.Pool.Exec(ctx, accountsDDL); err != nil {
				t.Fatal(err)
			}
			store := newPostgres(t, db)
			child := testproc.Start(t, "paused-member", "CHILD_DATABASE_URL="+db.URL, "CHILD_FENCED="+strconv.FormatBool(fenced))
			stale, _ := strconv.ParseInt(child.Expect("epoch", 60*time.Second), 10, 64)
			child.Stop()

			f := newFleet(t, store, testConfig)
			b := f.start("b")
			e := waitOwned(t, b, "acct", stale)
			if err := pgWrite(ctx, db.Pool, store, e, "b", true); err != nil {
				t.Fatal(err)
			}

			child.Send("write")
			child.Continue()
			result := child.Expect("result", 60*time.Second)
			checkAccount(t, db.Pool, result, fenced, e)
		})
	}
}

// waitOwned waits until m owns key's partition with an epoch above stale.
func waitOwned(t *testing.T, m *partition.Member, key string, stale int64) partition.Epoch {
	t.Helper()
	var e partition.Epoch
	waitFor(t, 60*time.Second, func() bool {
		for _, o := range m.Owned() {
			if o.Partition == m.Partition(key) && o.Token > stale {
				e = o
				return true
			}
		}
		return false
	})
	return e
}

func checkAccount(t *testing.T, pool *pgxpool.Pool, result string, fenced bool, e partition.Epoch) {
	t.Helper()
	var owner string
	var seq int
	if err := pool.QueryRow(ctx, `SELECT owner, seq FROM accounts WHERE id = 'acct'`).Scan(&owner, &seq); err != nil {
		t.Fatal(err)
	}
	if fenced {
		if result != fmt.Sprintf("fenced %s %d", e.Owner, e.Token) || owner != e.Owner || seq != 1 {
			t.Fatalf("paused member's fenced write: %q, account %s/%d; want rejection by epoch %d of %s", result, owner, seq, e.Token, e.Owner)
		}
		return
	}
	if result != "written" || owner == e.Owner || seq != 2 {
		t.Fatalf("naive write: %q, account %s/%d; the fault did not happen", result, owner, seq)
	}
}

// checkHandoverMetrics checks what the members of TestPausedMemberIsFenced
// counted: b took a's partitions over, each with its unowned time, and a's
// write was rejected by epoch when it was fenced.
func checkHandoverMetrics(t *testing.T, tel *telemetrytest.Telemetry, fenced bool) {
	t.Helper()
	handovers := tel.Sum(t, "lockfree.partition.handovers")
	if n, _ := tel.Count(t, "lockfree.partition.handover.duration"); handovers < 1 || int64(n) != handovers {
		t.Errorf("%d handovers, %d durations; want at least the paused member's partitions\n%s", handovers, n, tel.Describe(t))
	}
	want := map[bool]int64{true: 1, false: 0}[fenced]
	if n := tel.Sum(t, "lockfree.partition.stale_epochs"); n != want {
		t.Errorf("stale epochs = %d, want %d\n%s", n, want, tel.Describe(t))
	}
}

// The same sequence with the in-process pause hook, on both backends. The
// members' metrics count the handover and the rejected write.
func TestPausedMemberIsFenced(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		for _, fenced := range []bool{true, false} {
			t.Run(b.name+"/"+map[bool]string{true: "fenced write rejected", false: "naive write lands"}[fenced], func(t *testing.T) {
				t.Parallel()
				var write func(e partition.Epoch, who string) error
				var result func() (owner string, seq int)
				store := b.new(t)
				switch s := store.(type) {
				case *partition.Memory:
					var mu sync.Mutex
					owner, seq := "nobody", 0
					write = func(e partition.Epoch, who string) error {
						apply := func() error { mu.Lock(); owner, seq = who, seq+1; mu.Unlock(); return nil }
						if !fenced {
							return apply()
						}
						return s.Verify(e, apply)
					}
					result = func() (string, int) { mu.Lock(); defer mu.Unlock(); return owner, seq }
				case *partition.Postgres:
					pool := postgresPool(t, s)
					write = func(e partition.Epoch, who string) error { return pgWrite(ctx, pool, s, e, who, fenced) }
					result = func() (owner string, seq int) {
						pool.QueryRow(ctx, `SELECT owner, seq FROM accounts WHERE id = 'acct'`).Scan(&owner, &seq)
						return owner, seq
					}
				}

				tel := telemetrytest.New(t)
				cfg := testConfig
				cfg.MeterProvider = tel.Meters
				f := newFleet(t, store, cfg)
				a := f.start("a")
				epochs, wake, done := make(chan partition.Epoch, 1), make(chan struct{}), make(chan error, 1)
				go func() {
					done <- a.Do(ctx, "acct", func(_ context.Context, e partition.Epoch) error {
						epochs <- e
						<-wake
						return write(e, "a")
					})
				}()
				stale := <-epochs
				resume := f.pause("a")
				b := f.start("b")
				e := waitOwned(t, b, "acct", stale.Token)
				if err := write(e, "b"); err != nil {
					t.Fatal(err)
				}
				close(wake)
				err := <-done
				resume()
				owner, seq := result()
				checkHandoverMetrics(t, tel, fenced)
				var se *partition.StaleEpochError
				if fenced {
					want := partition.StaleEpochError{Partition: stale.Partition, Presented: stale.Token, Required: e.Token, Owner: "b"}
					if !errors.As(err, &se) || *se != want || owner != "b" || seq != 1 {
						t.Fatalf("paused member's write: %v, account %s/%d", err, owner, seq)
					}
					return
				}
				if err != nil || owner != "a" || seq != 2 {
					t.Fatalf("naive write: %v, account %s/%d; the fault did not happen", err, owner, seq)
				}
			})
		}
	}
}

// pools maps each test's Postgres store to its pool, for tests that need
// both.
var pools sync.Map

func postgresPool(t *testing.T, s *partition.Postgres) *pgxpool.Pool {
	t.Helper()
	v, ok := pools.Load(s)
	if !ok {
		t.Fatal("no pool for the store")
	}
	pool := v.(*pgxpool.Pool)
	if _, err := pool.Exec(ctx, accountsDDL); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	return pool
}
