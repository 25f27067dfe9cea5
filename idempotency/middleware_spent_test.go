package idempotency_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// spendTarget is an executor behind the middleware, with a way to count the
// charges of a handler that took effect.
type spendTarget struct {
	exec idempotency.Executor
	// db holds the charges table when the handler charges in the
	// executor's transaction (TxFrom): only committed rows took effect.
	db *testdb.DB
}

// spendTargets are the executors a middleware runs on: transactional mode
// on PostgreSQL (whose failed Do rolls the handler's writes back) and in
// memory, leased mode and the fenced twin on both stores (whose handlers'
// effects stay).
var spendTargets = []struct {
	name string
	new  func(t *testing.T) spendTarget
}{
	{"postgres", func(t *testing.T) spendTarget {
		db := testdb.New(t, idempotency.Migrations()...)
		if _, err := db.Pool.Exec(ctx, `CREATE TABLE charges (id serial PRIMARY KEY, body text)`); err != nil {
			t.Fatal(err)
		}
		return spendTarget{exec: newPostgres(t, db, nil), db: db}
	}},
	{"memory", func(t *testing.T) spendTarget {
		s, _ := idempotency.NewMemory(nil)
		return spendTarget{exec: s}
	}},
	{"leased", func(t *testing.T) spendTarget {
		s, _ := idempotency.NewMemory(nil)
		l, err := idempotency.NewLeased(s, &idempotency.LeasedConfig{TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return spendTarget{exec: l}
	}},
	{"leased-postgres", func(t *testing.T) spendTarget {
		l, err := idempotency.NewLeased(newPostgres(t, testdb.New(t, idempotency.Migrations()...), nil), &idempotency.LeasedConfig{TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return spendTarget{exec: l}
	}},
	{"fenced", func(t *testing.T) spendTarget {
		s, _ := idempotency.NewMemory(nil)
		f, err := idempotency.NewFenced(memoryLocks(nil), s, &idempotency.FencedConfig{LockerConfig: fencedlock.LockerConfig{TTL: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		return spendTarget{exec: f}
	}},
	{"fenced-postgres", func(t *testing.T) spendTarget {
		db := testdb.New(t, append(idempotency.Migrations(), fencedlock.Migrations()...)...)
		locks, err := fencedlock.NewPostgres(db.Pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		f, err := idempotency.NewFenced(locks, newPostgres(t, db, nil), &idempotency.FencedConfig{LockerConfig: fencedlock.LockerConfig{TTL: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		return spendTarget{exec: f}
	}},
}

// rollsBack reports whether a failed Do undoes the handler's charges.
func (s spendTarget) rollsBack() bool { return s.db != nil }

// charger charges on every run — in the executor's transaction when there
// is one — and then answers with answer on its first run, 201 "ok" after.
type charger struct {
	runs   atomic.Int64
	answer func(w http.ResponseWriter, r *http.Request)
}

func (h *charger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if tx, ok := idempotency.TxFrom(r.Context()); ok {
		if _, err := tx.Exec(context.WithoutCancel(r.Context()), `INSERT INTO charges (body) VALUES ('x')`); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	if h.runs.Add(1) == 1 && h.answer != nil {
		h.answer(w, r)
		return
	}
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "ok")
}

// charges counts the charges that took effect: the committed rows when the
// handler charges in a transaction, the handler's runs otherwise.
func (s spendTarget) charges(t *testing.T, h *charger) int64 {
	t.Helper()
	if s.db == nil {
		return h.runs.Load()
	}
	var n int64
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// spendLimit is the MaxResponseBody of the tests below.
const spendLimit = 32

// A handler that ran to the end, but whose answer the middleware cannot
// store, leaves its key spent: the first answer and every retry are the
// lost-response problem (500, ProblemResponseLost), and the handler's
// charge is not repeated. On PostgreSQL the charge rolls back with the
// transaction instead: nothing is spent, the 500 invites the retry, and
// the retry's charge is the only one.
func TestMiddlewareFinishedHandlerSpendsKey(t *testing.T) {
	t.Parallel()
	for _, target := range spendTargets {
		for _, tc := range []struct {
			name   string
			answer func(w http.ResponseWriter, r *http.Request)
		}{
			{"over MaxResponseBody", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, strings.Repeat("x", spendLimit))
				io.WriteString(w, "y") // one byte over
			}},
			{"status outside 200-599", func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(600)
				io.WriteString(w, "odd")
			}},
		} {
			t.Run(target.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				s := target.new(t)
				h := &charger{answer: tc.answer}
				var reported atomic.Int64
				cfg := idempotency.MiddlewareConfig{GlobalScope: true, MaxResponseBody: spendLimit,
					OnError: func(*http.Request, error) { reported.Add(1) }}
				srv := httptest.NewServer(newMiddleware(t, s.exec, cfg)(h))
				defer srv.Close()

				first := post(t, srv.URL, "k", "pay")
				retry := post(t, srv.URL, "k", "pay")
				if s.rollsBack() {
					if first.status != 500 || problemType(t, first) != idempotency.ProblemInternal {
						t.Fatalf("first = %+v, want 500 %s", first, idempotency.ProblemInternal)
					}
					if retry.status != 201 || retry.body != "ok" || retry.header.Get(idempotency.HeaderReplayed) != "" {
						t.Fatalf("retry = %+v, want the handler to run again", retry)
					}
					if again := post(t, srv.URL, "k", "pay"); again.status != 201 || again.header.Get(idempotency.HeaderReplayed) != "true" {
						t.Fatalf("second retry = %+v, want the retry's answer replayed", again)
					}
				} else {
					if got := s.charges(t, h); got != 1 {
						t.Fatalf("%d charges after the first request and a retry with its key, want 1 (first %d %s, retry %d %s)",
							got, first.status, first.body, retry.status, retry.body)
					}
					if first.status != 500 || problemType(t, first) != idempotency.ProblemResponseLost || first.header.Get(idempotency.HeaderReplayed) != "" {
						t.Fatalf("first = %+v, want 500 %s", first, idempotency.ProblemResponseLost)
					}
					if retry.status != 500 || problemType(t, retry) != idempotency.ProblemResponseLost ||
						retry.header.Get(idempotency.HeaderReplayed) != "true" || retry.body != first.body {
						t.Fatalf("retry = %+v, want the first answer replayed", retry)
					}
				}
				if got := s.charges(t, h); got != 1 {
					t.Fatalf("%d charges in all, want 1", got)
				}
				if reported.Load() != 1 {
					t.Fatalf("OnError told %d times, want once (of the first request)", reported.Load())
				}
			})
		}
	}
}

// A handler whose client went away while it worked, and which then ran to
// the end, leaves its key spent as any finished handler does: the retry
// gets its answer. On PostgreSQL the commit, sent with the ended request's
// context, fails and rolls the charge back, or goes through: either way
// one charge takes effect.
func TestMiddlewareClientGoneSpendsKey(t *testing.T) {
	t.Parallel()
	for _, target := range spendTargets {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			s := target.new(t)
			started := make(chan struct{})
			h := &charger{answer: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "ok")
			}}
			gone := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if h.runs.Load() == 0 {
					close(started)
					<-r.Context().Done() // the client went away
				}
				h.ServeHTTP(w, r)
			})
			mw := newMiddleware(t, s.exec, global)(gone)
			served := make(chan struct{}, 4)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer func() { served <- struct{}{} }()
				mw.ServeHTTP(w, r)
			}))
			defer srv.Close()

			reqCtx, cancel := context.WithCancel(ctx)
			req, _ := http.NewRequestWithContext(reqCtx, http.MethodPost, srv.URL, strings.NewReader("pay"))
			req.Header.Set(idempotency.HeaderKey, "k")
			errc := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			<-started
			cancel()
			if err := <-errc; err == nil {
				t.Fatal("the cancelled request got an answer")
			}
			<-served // the middleware is done with the first request

			retry := post(t, srv.URL, "k", "pay")
			if retry.status != 201 || retry.body != "ok" {
				t.Fatalf("retry = %+v, want 201 ok", retry)
			}
			if !s.rollsBack() && retry.header.Get(idempotency.HeaderReplayed) != "true" {
				t.Fatalf("retry = %+v, want the finished handler's answer replayed", retry)
			}
			if got := s.charges(t, h); got != 1 {
				t.Fatalf("%d charges, want 1", got)
			}
		})
	}
}
