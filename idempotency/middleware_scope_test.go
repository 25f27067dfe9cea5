package idempotency_test

import (
	"context"
	"errors"
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

func TestMiddlewareConfigIsChecked(t *testing.T) {
	t.Parallel()
	store, _ := idempotency.NewMemory(nil)
	tenant := func(*http.Request) (string, error) { return "t", nil }
	handler := http.NotFoundHandler()
	global := &idempotency.MiddlewareConfig{GlobalScope: true}
	for _, tc := range []struct {
		name string
		exec idempotency.Executor
		next http.Handler
		cfg  *idempotency.MiddlewareConfig
	}{
		{"no config", store, handler, nil},
		{"no scope", store, handler, &idempotency.MiddlewareConfig{}},
		{"two scopes", store, handler, &idempotency.MiddlewareConfig{Tenant: tenant, GlobalScope: true}},
		{"nil executor", nil, handler, global},
		{"nil handler", store, nil, global},
		{"Set-Cookie replayed", store, handler, &idempotency.MiddlewareConfig{GlobalScope: true, ReplayHeaders: []string{"ETag", "set-cookie"}}},
		{"Content-Length replayed", store, handler, &idempotency.MiddlewareConfig{GlobalScope: true, ReplayHeaders: []string{"Content-Length"}}},
		{"bad header name", store, handler, &idempotency.MiddlewareConfig{GlobalScope: true, ReplayHeaders: []string{"X Bad"}}},
		{"negative body limit", store, handler, &idempotency.MiddlewareConfig{GlobalScope: true, MaxRequestBody: -1}},
	} {
		if _, err := idempotency.NewMiddleware(tc.exec, tc.next, tc.cfg); !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%s: NewMiddleware = %v, want ErrInvalid", tc.name, err)
		}
	}
}

// asUser sends a POST as an authenticated user (the test's authentication
// puts the user in X-User; empty means none).
func asUser(t *testing.T, url, user, key, body string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(idempotency.HeaderKey, key)
	if user != "" {
		req.Header.Set("X-User", user)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}
}

// byUser is the Tenant function of the scope tests.
func byUser(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }

// A key is visible only in its caller's scope: another caller with the same
// key gets no replay, no 422 and no 409; it runs the handler.
func TestMiddlewareScopesKeysByCaller(t *testing.T) {
	t.Parallel()
	backends := map[string]func(t *testing.T) idempotency.Executor{
		"memory": func(t *testing.T) idempotency.Executor {
			s, _ := idempotency.NewMemory(&idempotency.MemoryConfig{InFlightWait: 50 * time.Millisecond})
			return s
		},
		"postgres": func(t *testing.T) idempotency.Executor {
			db := testdb.New(t, idempotency.Migrations()...)
			if _, err := db.Pool.Exec(ctx, `CREATE TABLE charges (id serial PRIMARY KEY, body text)`); err != nil {
				t.Fatal(err)
			}
			return newPostgres(t, db, &idempotency.PostgresConfig{InFlightWait: 50 * time.Millisecond})
		},
		"leased": func(t *testing.T) idempotency.Executor {
			s, _ := idempotency.NewMemory(nil)
			l, _ := idempotency.NewLeased(s, nil)
			return l
		},
		"fenced": func(t *testing.T) idempotency.Executor {
			s, _ := idempotency.NewMemory(nil)
			f, _ := idempotency.NewFenced(memoryLocks(nil), s, nil)
			return f
		},
	}
	for name, newExec := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := &chargeHandler{}
			srv := httptest.NewServer(newMiddleware(t, newExec(t), idempotency.MiddlewareConfig{Tenant: byUser})(h))
			defer srv.Close()

			alice := asUser(t, srv.URL, "alice", "k", `{"amount":1}`)
			if alice.status != 201 || alice.header.Get("Location") != "/charges/1" {
				t.Fatalf("alice = %+v", alice)
			}
			bob := asUser(t, srv.URL, "bob", "k", `{"amount":1}`)
			if bob.status != 201 || bob.header.Get(idempotency.HeaderReplayed) != "" || bob.header.Get("Location") != "/charges/2" {
				t.Fatalf("bob with alice's key and body = %+v, want his own charge", bob)
			}
			carol := asUser(t, srv.URL, "carol", "k", `{"amount":999}`)
			if carol.status != 201 || carol.header.Get("Location") != "/charges/3" {
				t.Fatalf("carol with alice's key and another body = %+v, want her own charge (no 422)", carol)
			}
			if r := asUser(t, srv.URL, "alice", "k", `{"amount":1}`); r.status != 201 || r.body != alice.body || r.header.Get(idempotency.HeaderReplayed) != "true" {
				t.Fatalf("alice's retry = %+v, want her replay", r)
			}
			if r := asUser(t, srv.URL, "", "k", `{"amount":1}`); r.status != 400 || problemType(t, r) != idempotency.ProblemInvalidKey {
				t.Fatalf("a request whose caller has no name = %+v, want 400", r)
			}
			if got := h.charges.Load(); got != 3 {
				t.Fatalf("%d charges, want 3", got)
			}

			// Alice's request in flight does not make bob's wait.
			h.started, h.block = make(chan struct{}, 2), make(chan struct{})
			done := make(chan response)
			go func() { done <- asUser(t, srv.URL, "alice", "k2", `{}`) }()
			<-h.started
			go func() { done <- asUser(t, srv.URL, "bob", "k2", `{}`) }()
			<-h.started // bob's ran too, while alice's is in flight
			close(h.block)
			for range 2 {
				if r := <-done; r.status != 201 {
					t.Fatalf("k2 = %+v", r)
				}
			}
		})
	}
}

// Set-Cookie goes out with the first response only: a retry never gets the
// session of the request that ran, not even from a record that holds one.
func TestMiddlewareNeverReplaysSetCookie(t *testing.T) {
	t.Parallel()
	store, _ := idempotency.NewMemory(nil)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "secret"})
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok")
	})
	srv := httptest.NewServer(newMiddleware(t, store, global)(handler))
	defer srv.Close()
	if r := post(t, srv.URL, "k", "body"); r.header.Get("Set-Cookie") == "" {
		t.Fatalf("first response has no Set-Cookie: %+v", r)
	}
	if r := post(t, srv.URL, "k", "body"); r.header.Get(idempotency.HeaderReplayed) != "true" || r.header.Get("Set-Cookie") != "" {
		t.Fatalf("replay = %+v, want no Set-Cookie", r)
	}

	// A record written with a cookie (by other code, or an older
	// configuration) does not replay it either.
	anyPayload := func(*http.Request, []byte) idempotency.Fingerprint { return idempotency.Fingerprint{} }
	_, err := store.Do(ctx, idempotency.Key{ID: "stored"}, idempotency.Fingerprint{}, func(context.Context) (idempotency.Result, error) {
		return idempotency.Result{Status: 200, Header: http.Header{"Set-Cookie": {"session=secret"}, "Content-Type": {"text/plain"}}, Body: []byte("ok")}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(newMiddleware(t, store, idempotency.MiddlewareConfig{GlobalScope: true, Fingerprint: anyPayload})(handler))
	defer srv2.Close()
	if r := post(t, srv2.URL, "stored", ""); r.header.Get(idempotency.HeaderReplayed) != "true" || r.header.Get("Set-Cookie") != "" || r.header.Get("Content-Type") != "text/plain" {
		t.Fatalf("replay of a stored cookie = %+v", r)
	}
}

// A handler that panics leaves its key free with every executor: net/http
// aborts the answer, and the retry runs the handler.
func TestMiddlewareHandlerPanicLeavesKeyFree(t *testing.T) {
	t.Parallel()
	backends := map[string]func(t *testing.T) idempotency.Executor{
		"memory": func(t *testing.T) idempotency.Executor { s, _ := idempotency.NewMemory(nil); return s },
		"postgres": func(t *testing.T) idempotency.Executor {
			return newPostgres(t, testdb.New(t, idempotency.Migrations()...), nil)
		},
		"leased": func(t *testing.T) idempotency.Executor {
			s, _ := idempotency.NewMemory(nil)
			l, _ := idempotency.NewLeased(s, &idempotency.LeasedConfig{TTL: time.Hour})
			return l
		},
		"fenced": func(t *testing.T) idempotency.Executor {
			s, _ := idempotency.NewMemory(nil)
			f, _ := idempotency.NewFenced(memoryLocks(nil), s, &idempotency.FencedConfig{LockerConfig: fencedlock.LockerConfig{TTL: time.Hour}})
			return f
		},
	}
	for name, newExec := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int64
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					w.Header().Set("Content-Type", "text/plain")
					io.WriteString(w, "half an answer")
					panic(http.ErrAbortHandler) // aborts without a log line
				}
				io.WriteString(w, "ok")
			})
			srv := httptest.NewServer(newMiddleware(t, newExec(t), global)(handler))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
			req.Header.Set(idempotency.HeaderKey, "k")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				t.Fatalf("the panicking handler's request got %d, want the connection aborted", resp.StatusCode)
			}
			if r := post(t, srv.URL, "k", "x"); r.status != 200 || r.body != "ok" || runs.Load() != 2 {
				t.Fatalf("retry after a panic = %+v after %d runs, want the handler to run again", r, runs.Load())
			}
		})
	}
}
