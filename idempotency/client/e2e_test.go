package client_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/idempotency/client"
	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// payments is the server of the end-to-end tests: the real middleware on
// the PostgreSQL executor, in front of a handler that charges in the
// middleware's transaction, behind a fault proxy that can lose a response.
type payments struct {
	db    *testdb.DB
	proxy *faultproxy.Proxy
	url   string // through the proxy
}

func newPayments(t *testing.T, mw *idempotency.MiddlewareConfig) payments {
	t.Helper()
	db := testdb.New(t, idempotency.Migrations()...)
	if _, err := db.Pool.Exec(context.Background(), `CREATE TABLE charges (id bigserial PRIMARY KEY, path text NOT NULL, body text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := idempotency.TxFrom(r.Context())
		body, _ := io.ReadAll(r.Body)
		var err error
		if ok {
			_, err = tx.Exec(r.Context(), `INSERT INTO charges (path, body) VALUES ($1, $2)`, r.URL.Path, string(body))
		} else {
			_, err = db.Pool.Exec(r.Context(), `INSERT INTO charges (path, body) VALUES ($1, $2)`, r.URL.Path, string(body))
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charged %s", body)
	})
	if mw == nil {
		mw = &idempotency.MiddlewareConfig{GlobalScope: true}
	}
	h, err := idempotency.NewMiddleware(store, charge, mw)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	proxy, err := faultproxy.Start(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	return payments{db: db, proxy: proxy, url: "http://" + proxy.Addr()}
}

// charges counts the charges of path.
func (p payments) charges(t *testing.T, path string) int {
	t.Helper()
	var n int
	if err := p.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM charges WHERE path = $1`, path).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// base is each attempt's transport: a new connection per attempt, so that
// net/http never resends a request on its own over a reused one.
func base() *http.Transport {
	return &http.Transport{DisableKeepAlives: true, Proxy: nil, DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}
}

// lostResponse charges path through c once, with the server's response to
// the first attempt lost: the server charged and committed, and the
// client's connection was reset before the answer reached it. It returns
// how many charges the payment made, after the client's answer.
func lostResponse(t *testing.T, p payments, do func(req *http.Request) (*http.Response, error), path string) (int, *http.Response) {
	t.Helper()
	lost := p.proxy.Stats().LostReplies
	p.proxy.LoseReply([]byte("POST " + path + " "))
	req, err := http.NewRequest(http.MethodPost, p.url+path, strings.NewReader("42 EUR"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	if n := p.proxy.Stats().LostReplies; n != lost+1 {
		t.Fatalf("%d responses lost, want %d: the fault did not bite", n-lost, 1)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || string(body) != "charged 42 EUR" {
		t.Fatalf("POST %s answered %d %q, want 201 \"charged 42 EUR\"", path, resp.StatusCode, body)
	}
	return p.charges(t, path), resp
}

// The Transport against the real middleware on PostgreSQL, with the
// response of the first attempt lost: the retry carries the same key and
// gets the first response, replayed — one charge. Its unsafe twin, a
// client that mints a key per attempt (what a retry loop around a keyed
// request does when the key is made inside the loop), charges twice.
func TestLostResponseChargesOnce(t *testing.T) {
	t.Parallel()
	p := newPayments(t, nil)
	tr, err := client.NewTransport(fast(client.Config{Base: base()}))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr, Timeout: time.Minute}
	path := "/charges/" + uuid.NewString()
	n, resp := lostResponse(t, p, c.Do, path)
	if n != 1 || resp.Header.Get(client.HeaderReplayed) != "true" {
		t.Fatalf("with the Transport: %d charges, Idempotent-Replayed %q; want 1 and the first response replayed",
			n, resp.Header.Get(client.HeaderReplayed))
	}

	naive := &http.Client{Transport: base(), Timeout: time.Minute}
	freshKeys := func(req *http.Request) (*http.Response, error) {
		for {
			r := req.Clone(req.Context())
			r.Body, _ = req.GetBody()
			r.Header.Set(client.HeaderKey, `"`+uuid.NewString()+`"`)
			resp, err := naive.Do(r)
			if err == nil {
				return resp, nil
			}
		}
	}
	path = "/charges/" + uuid.NewString()
	if n, _ := lostResponse(t, p, freshKeys, path); n != 2 {
		t.Fatalf("the unsafe twin charged %d times, want 2: the check could not see a double charge", n)
	}
}

// A request that the Transport does not key (Methods leave POST out, and
// the caller set no key) is sent once: its lost response is the caller's
// error, and it is charged once. The middleware lets it through unkeyed
// (Optional), as it would any client's.
func TestUnkeyedLostResponseNotRetried(t *testing.T) {
	t.Parallel()
	p := newPayments(t, &idempotency.MiddlewareConfig{GlobalScope: true, Optional: true})
	if err := checkUnkeyedSentOnce(t, p); err != nil {
		t.Fatal(err)
	}
}

// checkUnkeyedSentOnce guards the request the Transport did not key: it is
// never sent again (without a key, every attempt is a new charge).
func checkUnkeyedSentOnce(t *testing.T, p payments) error {
	tr, err := client.NewTransport(fast(client.Config{Base: base(), Methods: []string{http.MethodPatch}}))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr, Timeout: time.Minute}
	path := "/charges/" + uuid.NewString()
	p.proxy.LoseReply([]byte("POST " + path + " "))
	req, _ := http.NewRequest(http.MethodPost, p.url+path, strings.NewReader("42 EUR"))
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if n := p.charges(t, path); n != 1 || err == nil {
		return fmt.Errorf("an unkeyed POST whose response was lost: %d charges, error %v; want 1 charge and the error", n, err)
	}
	return nil
}

// checkSameKey guards the key of the retries: a lost response is retried
// with the first attempt's key, and charged once.
func checkSameKey(t *testing.T, p payments) error {
	tr, err := client.NewTransport(fast(client.Config{Base: base()}))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr, Timeout: time.Minute}
	path := "/charges/" + uuid.NewString()
	if n, _ := lostResponse(t, p, c.Do, path); n != 1 {
		return fmt.Errorf("a POST whose first response was lost was charged %d times, want 1", n)
	}
	return nil
}

// guard is one check and the mutant site whose condition it guards.
type guard struct {
	mutant string
	check  func(t *testing.T) error
}

func guards() []guard {
	return []guard{
		{"idempotency.client.same-key", func(t *testing.T) error { return checkSameKey(t, newPayments(t, nil)) }},
		{"idempotency.client.unkeyed", func(t *testing.T) error {
			return checkUnkeyedSentOnce(t, newPayments(t, &idempotency.MiddlewareConfig{GlobalScope: true, Optional: true}))
		}},
	}
}

func TestGuards(t *testing.T) {
	t.Parallel()
	for _, g := range guards() {
		t.Run(g.mutant, func(t *testing.T) {
			t.Parallel()
			if err := g.check(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The replay policy, both sides: a handler answers 503 on its first run
// and 201 after. Under DefaultStored the 503 is not stored, so the
// Transport's retry runs the handler again and gets its 201; under
// AllStored the 503 is the key's outcome, and the retry gets it replayed
// and stops there.
func TestReplayPolicy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		stored func(int) bool
		runs   int32
		status int
	}{
		{"DefaultStored", nil, 2, http.StatusCreated},
		{"AllStored", idempotency.AllStored, 1, http.StatusServiceUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store, err := idempotency.NewMemory(nil)
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			h, err := idempotency.NewMiddleware(store, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}), &idempotency.MiddlewareConfig{GlobalScope: true, Stored: c.stored})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			cl := newClient(t, fast(client.Config{}))
			resp, err := post(t, cl, srv.URL, "x")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.status || runs.Load() != c.runs {
				t.Fatalf("status %d after %d runs of the handler, want %d after %d", resp.StatusCode, runs.Load(), c.status, c.runs)
			}
		})
	}
}
