package idempotency_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testproc"
)

// The payments scenario: charges is the effect in the database (one row per
// execution), provider_calls and provider_charges stand for an external
// payment provider that deduplicates by the idempotency key it is given.
const paymentsDDL = `
CREATE TABLE charges (id serial PRIMARY KEY, key text NOT NULL, by text NOT NULL);
CREATE TABLE provider_calls (id serial PRIMARY KEY, idem_key text NOT NULL, by text NOT NULL);
CREATE TABLE provider_charges (idem_key text PRIMARY KEY, by text NOT NULL)`

var payFP = idempotency.NewFingerprint([]byte("POST"), []byte("/pay"), []byte(`{"amount":100}`))

func paymentsDB(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t, append(idempotency.Migrations(), fencedlock.Migrations()...)...)
	if _, err := db.Pool.Exec(ctx, paymentsDDL); err != nil {
		t.Fatal(err)
	}
	return db
}

func count(t *testing.T, db *testdb.DB, sql string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(ctx, sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// records is what the test executors below need of a store.
type records interface {
	Lookup(ctx context.Context, key idempotency.Key) (idempotency.Record, bool, error)
	PutFenced(ctx context.Context, key idempotency.Key, fp idempotency.Fingerprint, token int64, r idempotency.Result) error
}

func storedBody(t *testing.T, store records, key idempotency.Key) string {
	t.Helper()
	rec, found, err := store.Lookup(ctx, key)
	if err != nil || !found || rec.State != idempotency.Done {
		t.Fatalf("record of %s: %+v, %v, %v", key, rec, found, err)
	}
	return string(rec.Result.Body)
}

// charge is the effect in the database: in the execution's transaction
// when there is one, otherwise committed at once.
func charge(ctx context.Context, pool *pgxpool.Pool, key idempotency.Key, by string) error {
	sql := `INSERT INTO charges (key, by) VALUES ($1, $2)`
	if tx, ok := idempotency.TxFrom(ctx); ok {
		_, err := tx.Exec(ctx, sql, key.ID, by)
		return err
	}
	_, err := pool.Exec(ctx, sql, key.ID, by)
	return err
}

// callProvider is the external effect: every call is logged, and the
// provider charges once per idempotency key it is given.
func callProvider(pool *pgxpool.Pool, idemKey, by string) error {
	// The call goes out even if the caller's context has been cancelled:
	// a process that paused right after checking its context does that.
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO provider_calls (idem_key, by) VALUES ($1, $2)`, idemKey, by); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, `INSERT INTO provider_charges (idem_key, by) VALUES ($1, $2) ON CONFLICT DO NOTHING`, idemKey, by)
	return err
}

// unguarded is check-then-act without a claim: look the key up, run, and
// record unconditionally (every writer presents the same token, so the last
// one wins). It is what the alternatives are measured against.
type unguarded struct{ records records }

func (u unguarded) Do(ctx context.Context, key idempotency.Key, fp idempotency.Fingerprint, fn func(context.Context) (idempotency.Result, error)) (idempotency.Result, error) {
	if rec, found, err := u.records.Lookup(ctx, key); err != nil || (found && rec.State == idempotency.Done) {
		rec.Result.Replayed = true
		return rec.Result, err
	}
	res, err := fn(ctx)
	if err != nil {
		return idempotency.Result{}, err
	}
	return res, u.records.PutFenced(ctx, key, fp, 1, res)
}

// powertools is leased mode as AWS Powertools does it: an in-progress record
// with an expiry, no renewal, the provider called with a key of the attempt,
// and an unconditional completion.
type powertools struct {
	store *idempotency.Postgres
	pool  *pgxpool.Pool
	ttl   time.Duration
}

func (p powertools) Do(ctx context.Context, key idempotency.Key, fp idempotency.Fingerprint, fn func(context.Context) (idempotency.Result, error)) (idempotency.Result, error) {
	lease, replay, err := p.store.Claim(ctx, key, fp, p.ttl)
	if err != nil || replay != nil {
		if replay != nil {
			return *replay, nil
		}
		return idempotency.Result{}, err
	}
	res, err := fn(context.WithValue(ctx, tokenKey{}, lease.Token))
	if err != nil {
		return idempotency.Result{}, err
	}
	_, err = p.pool.Exec(ctx, `UPDATE lockfree_idempotency_keys SET state = 'done', status = $3, body = $4
		WHERE tenant = $1 AND key = $2`, key.Tenant, key.ID, res.Status, res.Body)
	return res, err
}

type tokenKey struct{}

// naiveLock is the same lease lock as the fenced twin with an unfenced
// record write.
type naiveLock struct {
	locks   fencedlock.Store
	records records
	ttl     time.Duration
}

func (n naiveLock) Do(ctx context.Context, key idempotency.Key, fp idempotency.Fingerprint, fn func(context.Context) (idempotency.Result, error)) (idempotency.Result, error) {
	lease, err := n.locks.Acquire(ctx, "idempotency/naive/"+idempotency.DeriveKey(key), "naive", n.ttl)
	if errors.Is(err, fencedlock.ErrHeld) {
		return idempotency.Result{}, &idempotency.InFlightError{Key: key, RetryAfter: time.Second}
	}
	if err != nil {
		return idempotency.Result{}, err
	}
	defer n.locks.Release(context.WithoutCancel(ctx), lease)
	return unguarded{n.records}.Do(ctx, key, fp, fn)
}

// payer is the child process of the fault tests. It runs one execution of
// CHILD_KEY with the executor named by CHILD_MODE, reports when its effect
// is about to happen or has happened, waits for "go", and reports its
// outcome.
func payer(in *bufio.Scanner, out io.Writer) error {
	pool, err := pgxpool.New(ctx, os.Getenv("CHILD_DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := idempotency.NewPostgres(pool, nil)
	if err != nil {
		return err
	}
	exec, err := executor(os.Getenv("CHILD_MODE"), store, pool)
	if err != nil {
		return err
	}
	key := idempotency.Key{ID: os.Getenv("CHILD_KEY")}
	res, err := exec.Do(ctx, key, payFP, payment(os.Getenv("CHILD_MODE"), pool, key, "child", func(event string) error {
		fmt.Fprintln(out, event)
		if !in.Scan() || in.Text() != "go" {
			return errors.New("expected go")
		}
		return nil
	}))
	var s *idempotency.SupersededError
	var u *idempotency.UnrecordedError
	switch {
	case errors.As(err, &s):
		fmt.Fprintf(out, "result superseded %d\n", s.Required)
	case errors.Is(err, fencedlock.ErrFenced):
		fmt.Fprintln(out, "result fenced")
	case errors.As(err, &u):
		fmt.Fprintf(out, "result unrecorded %s\n", u.Result.Body)
	case err != nil:
		return err
	default:
		fmt.Fprintf(out, "result %s\n", res.Body)
	}
	return nil
}

// executor builds the executor of a mode on PostgreSQL.
func executor(mode string, store *idempotency.Postgres, pool *pgxpool.Pool) (idempotency.Executor, error) {
	// Generous: a loaded machine must not take a running child's lease
	// away before the test stops it.
	const ttl = 3 * time.Second
	locks, err := fencedlock.NewPostgres(pool, nil)
	if err != nil {
		return nil, err
	}
	switch mode {
	case "tx":
		return store, nil
	case "unguarded":
		return unguarded{store}, nil
	case "leased":
		return idempotency.NewLeased(store, &idempotency.LeasedConfig{TTL: ttl})
	case "powertools":
		return powertools{store, pool, ttl}, nil
	case "fenced":
		return idempotency.NewFenced(locks, store, &idempotency.FencedConfig{LockerConfig: fencedlock.LockerConfig{TTL: ttl}})
	case "naive-lock":
		return naiveLock{locks, store, ttl}, nil
	}
	return nil, fmt.Errorf("unknown mode %q", mode)
}

// payment is the work of a mode. pause is called at the point where the
// test pauses or kills the process: after the database effect (transactional
// and lock modes: between effect and record), or before the provider call
// (leased modes).
func payment(mode string, pool *pgxpool.Pool, key idempotency.Key, by string, pause func(event string) error) func(context.Context) (idempotency.Result, error) {
	return func(ctx context.Context) (idempotency.Result, error) {
		switch mode {
		case "leased", "powertools":
			idemKey := ""
			if a, ok := idempotency.AttemptFrom(ctx); ok {
				idemKey = a.DeriveKey("charge") // the same for every attempt
			} else {
				idemKey = fmt.Sprintf("attempt-%d", ctx.Value(tokenKey{})) // a new one per attempt
			}
			if err := pause("claimed"); err != nil {
				return idempotency.Result{}, err
			}
			if err := callProvider(pool, idemKey, by); err != nil {
				return idempotency.Result{}, err
			}
		default:
			if err := charge(ctx, pool, key, by); err != nil {
				return idempotency.Result{}, err
			}
			if err := pause("charged"); err != nil {
				return idempotency.Result{}, err
			}
		}
		return idempotency.Result{Status: 201, Body: []byte(by)}, nil
	}
}

func noPause(string) error { return nil }

// retry runs the parent's execution until it is not in flight.
func retry(t *testing.T, exec idempotency.Executor, key idempotency.Key, fn func(context.Context) (idempotency.Result, error)) (idempotency.Result, error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := exec.Do(ctx, key, payFP, fn)
		if !errors.Is(err, idempotency.ErrInFlight) || time.Now().After(deadline) {
			return res, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The slow-first race with a real pause: the first execution is stopped with
// SIGSTOP past its lease (3 s) at its most dangerous point, a retry arrives,
// and the first is resumed.
func TestSlowFirstPausedProcess(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode string
		// check inspects the outcome: the child's last line, the record
		// and the effects.
		check func(t *testing.T, db *testdb.DB, store *idempotency.Postgres, key idempotency.Key, child string, parentErr error)
	}{
		{"tx", func(t *testing.T, db *testdb.DB, store *idempotency.Postgres, key idempotency.Key, child string, parentErr error) {
			// The retry waited behind the open transaction; it could never
			// take over, so it replayed the child's answer.
			if parentErr != nil || child != "child" || storedBody(t, store, key) != "child" {
				t.Fatalf("child %q, parent %v, stored %q", child, parentErr, storedBody(t, store, key))
			}
			if n := count(t, db, `SELECT count(*) FROM charges`); n != 1 {
				t.Fatalf("%d charges, want 1", n)
			}
		}},
		{"unguarded", func(t *testing.T, db *testdb.DB, store *idempotency.Postgres, key idempotency.Key, child string, parentErr error) {
			if n := count(t, db, `SELECT count(*) FROM charges`); n != 2 {
				t.Fatalf("%d charges; the unguarded twin should have charged twice (was the pause real?)", n)
			}
		}},
		{"leased", func(t *testing.T, db *testdb.DB, store *idempotency.Postgres, key idempotency.Key, child string, parentErr error) {
			// The stale attempt's completion is refused; the provider saw
			// both attempts and charged once, thanks to the derived key.
			if parentErr != nil || !strings.HasPrefix(child, "superseded") || storedBody(t, store, key) != "parent" {
				t.Fatalf("child %q, parent %v, stored %q", child, parentErr, storedBody(t, store, key))
			}
			if calls, charges := count(t, db, `SELECT count(*) FROM provider_calls`), count(t, db, `SELECT count(*) FROM provider_charges`); calls != 2 || charges != 1 {
				t.Fatalf("provider calls %d, charges %d; want 2 calls (the pause was real) and 1 charge", calls, charges)
			}
		}},
		{"powertools", func(t *testing.T, db *testdb.DB, store *idempotency.Postgres, key idempotency.Key, child string, parentErr error) {
			// Unconditional completion: the stale attempt overwrites the
			// record, and the provider charged twice.
			if child != "child" || storedBody(t, store, key) != "child" || count(t, db, `SELECT count(*) FROM provider_charges`) != 2 {
				t.Fatalf("child %q, stored %q, %d provider charges: the unguarded twin should double-charge and overwrite",
					child, storedBody(t, store, key), count(t, db, `SELECT count(*) FROM provider_charges`))
			}
		}},
		{"fenced", func(t *testing.T, db *testdb.DB, store *idempotency.Postgres, key idempotency.Key, child string, parentErr error) {
			// The lock did not stop the second execution; the fenced
			// record write rejected the stale one, whose holder is told
			// that its work was done (it charged) but not recorded.
			if parentErr != nil || child != "unrecorded child" || storedBody(t, store, key) != "parent" {
				t.Fatalf("child %q, parent %v, stored %q", child, parentErr, storedBody(t, store, key))
			}
		}},
		{"naive-lock", func(t *testing.T, db *testdb.DB, store *idempotency.Postgres, key idempotency.Key, child string, parentErr error) {
			if child != "child" || storedBody(t, store, key) != "child" || count(t, db, `SELECT count(*) FROM charges`) != 2 {
				t.Fatalf("child %q, stored %q: the naive lock should let the stale write land", child, storedBody(t, store, key))
			}
		}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			db := paymentsDB(t)
			store := newPostgres(t, db, &idempotency.PostgresConfig{InFlightWait: 200 * time.Millisecond})
			exec, err := executor(tc.mode, store, db.Pool)
			if err != nil {
				t.Fatal(err)
			}
			key := idempotency.Key{ID: "pay-" + tc.mode}
			child := testproc.Start(t, "payer", "CHILD_DATABASE_URL="+db.URL, "CHILD_MODE="+tc.mode, "CHILD_KEY="+key.ID)
			event := map[bool]string{true: "claimed", false: "charged"}[tc.mode == "leased" || tc.mode == "powertools"]
			child.Expect(event, 60*time.Second)
			child.Stop()

			if tc.mode == "tx" {
				// No lease exists to expire: the retry is in flight for as
				// long as the first transaction is open, here 3 s.
				for range 3 {
					time.Sleep(time.Second)
					if _, err := exec.Do(ctx, key, payFP, payment(tc.mode, db.Pool, key, "parent", noPause)); !errors.Is(err, idempotency.ErrInFlight) {
						t.Fatalf("retry while the first transaction is open: %v, want ErrInFlight", err)
					}
				}
				child.Send("go")
				child.Continue()
				childResult := child.Expect("result", 60*time.Second)
				res, err := exec.Do(ctx, key, payFP, payment(tc.mode, db.Pool, key, "parent", noPause))
				if err == nil && (!res.Replayed || string(res.Body) != "child") {
					t.Fatalf("retry after the commit = %+v, want the child's answer replayed", res)
				}
				tc.check(t, db, store, key, childResult, err)
				return
			}
			// The retry gets through once the paused child's lease is over
			// on the database's clock.
			res, err := retry(t, exec, key, payment(tc.mode, db.Pool, key, "parent", noPause))
			if err != nil || res.Replayed || string(res.Body) != "parent" {
				t.Fatalf("retry after the lease = %+v, %v", res, err)
			}
			child.Send("go")
			child.Continue()
			tc.check(t, db, store, key, child.Expect("result", 60*time.Second), nil)
		})
	}
}

// Crash between effect and record: the child is killed after its charge and
// before the result is recorded. In transactional mode the charge rolls back
// with the claim, so the retry charges exactly once; the unguarded twin
// charges twice.
func TestCrashBetweenEffectAndRecord(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"tx", "unguarded"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			db := paymentsDB(t)
			store := newPostgres(t, db, &idempotency.PostgresConfig{InFlightWait: 200 * time.Millisecond})
			exec, _ := executor(mode, store, db.Pool)
			key := idempotency.Key{ID: "crash-" + mode}
			child := testproc.Start(t, "payer", "CHILD_DATABASE_URL="+db.URL, "CHILD_MODE="+mode, "CHILD_KEY="+key.ID)
			child.Expect("charged", 60*time.Second)
			child.Kill()

			// The server rolls back the dead client's transaction when it
			// notices the closed connection; until then the retry is in
			// flight.
			res, err := retry(t, exec, key, payment(mode, db.Pool, key, "parent", noPause))
			if err != nil || res.Replayed || string(res.Body) != "parent" {
				t.Fatalf("retry after the crash = %+v, %v", res, err)
			}
			res, err = exec.Do(ctx, key, payFP, payment(mode, db.Pool, key, "again", noPause))
			if err != nil || !res.Replayed || string(res.Body) != "parent" {
				t.Fatalf("second retry = %+v, %v; want the parent's answer replayed", res, err)
			}
			charges := count(t, db, `SELECT count(*) FROM charges`)
			switch {
			case mode == "tx" && charges != 1:
				t.Fatalf("%d charges after a crash and a retry, want exactly 1", charges)
			case mode == "unguarded" && charges != 2:
				t.Fatalf("%d charges; the unguarded twin should have charged twice (was the crash real?)", charges)
			}
		})
	}
}

// blockingFn returns work that signals when it starts and waits to be
// released: the in-process pause.
func blockingFn(effects *atomic.Int64, body string, started chan<- struct{}, release <-chan struct{}) func(context.Context) (idempotency.Result, error) {
	return func(context.Context) (idempotency.Result, error) {
		effects.Add(1)
		if started != nil {
			started <- struct{}{}
			<-release
		}
		return idempotency.Result{Status: 201, Body: []byte(body)}, nil
	}
}

// The slow-first race in one process, with a test hook: the first
// execution blocks inside its work while the clock moves past its lease and
// a retry arrives. The executors' metrics count what each mode did with the
// two executions.
func TestSlowFirstHook(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"tx", "leased", "fenced", "unguarded"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c := &clock.Manual{}
			tel := telemetrytest.New(t)
			store, _ := idempotency.NewMemory(&idempotency.MemoryConfig{Clock: c, InFlightWait: 20 * time.Millisecond, MeterProvider: tel.Meters})
			var exec idempotency.Executor
			switch mode {
			case "tx":
				exec = store
			case "leased":
				exec, _ = idempotency.NewLeased(store, &idempotency.LeasedConfig{TTL: time.Second, MeterProvider: tel.Meters})
			case "fenced":
				exec, _ = idempotency.NewFenced(memoryLocks(c), store, &idempotency.FencedConfig{
					LockerConfig: fencedlock.LockerConfig{TTL: time.Second, MeterProvider: tel.Meters}})
			case "unguarded":
				exec = unguarded{store}
			}
			key := idempotency.Key{ID: "slow"}
			var effects atomic.Int64
			started, release := make(chan struct{}), make(chan struct{})
			type outcome struct {
				res idempotency.Result
				err error
			}
			first := make(chan outcome, 1)
			go func() {
				res, err := exec.Do(ctx, key, payFP, blockingFn(&effects, "first", started, release))
				first <- outcome{res, err}
			}()
			<-started
			c.Advance(5 * time.Second) // past every lease
			second, secondErr := exec.Do(ctx, key, payFP, blockingFn(&effects, "second", nil, nil))
			close(release)
			o := <-first
			rec, _, _ := store.Lookup(ctx, key)
			switch mode {
			case "tx":
				if !errors.Is(secondErr, idempotency.ErrInFlight) || o.err != nil || effects.Load() != 1 || string(rec.Result.Body) != "first" {
					t.Fatalf("second %v, first %+v, effects %d, stored %q", secondErr, o, effects.Load(), rec.Result.Body)
				}
			case "leased":
				if secondErr != nil || string(second.Body) != "second" || !errors.Is(o.err, idempotency.ErrSuperseded) || string(rec.Result.Body) != "second" {
					t.Fatalf("second %+v %v, first %+v, stored %q", second, secondErr, o, rec.Result.Body)
				}
			case "fenced":
				// The first's work was done; only its record was refused.
				unrecorded, _ := errors.AsType[*idempotency.UnrecordedError](o.err)
				if secondErr != nil || unrecorded == nil || string(unrecorded.Result.Body) != "first" ||
					errors.Is(o.err, fencedlock.ErrFenced) || string(rec.Result.Body) != "second" {
					t.Fatalf("second %+v %v, first %+v, stored %q", second, secondErr, o, rec.Result.Body)
				}
			case "unguarded":
				if effects.Load() != 2 || string(rec.Result.Body) != "first" {
					t.Fatalf("effects %d, stored %q: the unguarded twin should run twice and let the stale write land", effects.Load(), rec.Result.Body)
				}
			}
			checkSlowFirstMetrics(t, tel, mode)
		})
	}
}

// checkSlowFirstMetrics checks the outcomes TestSlowFirstHook's executor
// counted: the mode's refusal of one execution (the fenced twin's first
// execution is done but unrecorded), the other executed; the unguarded twin
// is not instrumented.
func checkSlowFirstMetrics(t *testing.T, tel *telemetrytest.Telemetry, mode string) {
	t.Helper()
	refused := map[string]string{"tx": "in_flight", "leased": "superseded", "fenced": "unrecorded"}[mode]
	want := map[string]int64{"executed": 1, refused: 1}
	if mode == "unguarded" {
		want = map[string]int64{}
	}
	var total int64
	for outcome, n := range want {
		if got := tel.Sum(t, "lockfree.idempotency.requests", attribute.String(telemetry.Outcome, outcome)); got != n {
			t.Errorf("%s: %s = %d, want %d\n%s", mode, outcome, got, n, tel.Describe(t))
		}
		total += n
	}
	if got := tel.Sum(t, "lockfree.idempotency.requests"); got != total {
		t.Errorf("%s: %d executions counted, want %d\n%s", mode, got, total, tel.Describe(t))
	}
	if mode == "fenced" {
		if n := tel.Sum(t, "lockfree.fencedlock.fenced.rejections"); n != 1 {
			t.Errorf("fencedlock rejections = %d, want the stale holder's\n%s", n, tel.Describe(t))
		}
	}
}
