package idempotency_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// newMiddleware builds the middleware or fails the test.
func newMiddleware(t testing.TB, exec idempotency.Executor, cfg idempotency.MiddlewareConfig) func(http.Handler) http.Handler {
	t.Helper()
	return func(next http.Handler) http.Handler {
		t.Helper()
		mw, err := idempotency.NewMiddleware(exec, next, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		return mw
	}
}

// global is the configuration of tests with a single caller.
var global = idempotency.MiddlewareConfig{GlobalScope: true}

type response struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, url, key, body string) response {
	t.Helper()
	return send(t, http.MethodPost, url, key, body)
}

func send(t *testing.T, method, url, key, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(idempotency.HeaderKey, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}
}

// problemType checks an RFC 9457 body and returns its type.
func problemType(t *testing.T, r response) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json (body %s)", ct, r.body)
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
		Title  string `json:"title"`
	}
	if err := json.Unmarshal([]byte(r.body), &p); err != nil || p.Status != r.status || p.Title == "" {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	return p.Type
}

// chargeHandler charges once per request and answers 201 with a Location,
// a Content-Type and a header that is not replayed.
type chargeHandler struct {
	charges atomic.Int64
	block   chan struct{} // when set, the handler waits on it
	started chan struct{}
}

func (h *chargeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		fmt.Fprint(w, "listing")
		return
	}
	body, _ := io.ReadAll(r.Body)
	if h.started != nil {
		h.started <- struct{}{}
	}
	if h.block != nil {
		<-h.block
	}
	if tx, ok := idempotency.TxFrom(r.Context()); ok {
		if _, err := tx.Exec(r.Context(), `INSERT INTO charges (body) VALUES ($1)`, string(body)); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
	}
	n := h.charges.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/charges/%d", n))
	w.Header().Set("X-Request-Id", fmt.Sprintf("req-%d", n))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"charge":%d,"request":%s}`, n, body)
}

func TestMiddleware(t *testing.T) {
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
			l, err := idempotency.NewLeased(s, nil)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	}
	for name, newExec := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := &chargeHandler{}
			srv := httptest.NewServer(newMiddleware(t, newExec(t), global)(h))
			defer srv.Close()

			first := post(t, srv.URL, "key-1", `{"amount":100}`)
			if first.status != 201 || first.header.Get(idempotency.HeaderReplayed) != "" || first.header.Get("X-Request-Id") != "req-1" {
				t.Fatalf("first = %+v", first)
			}
			for _, k := range []string{"key-1", `"key-1"`, ` "key-1";p=1`} {
				replay := post(t, srv.URL, k, `{"amount":100}`)
				if replay.status != 201 || replay.body != first.body || replay.header.Get(idempotency.HeaderReplayed) != "true" ||
					replay.header.Get("Location") != "/charges/1" || replay.header.Get("Content-Type") != "application/json" {
					t.Fatalf("replay with %s = %+v", k, replay)
				}
				if replay.header.Get("X-Request-Id") != "" {
					t.Fatalf("a header outside ReplayHeaders was replayed: %v", replay.header)
				}
			}
			long := strings.Repeat("k", idempotency.MaxKeyLen+1)
			for _, tc := range []struct {
				name, key, body string
				status          int
				typ             string
			}{
				{"missing key", "", `{}`, 400, idempotency.ProblemMissingKey},
				{"oversized key", long, `{}`, 400, idempotency.ProblemInvalidKey},
				{"unterminated quote", `"abc`, `{}`, 400, idempotency.ProblemInvalidKey},
				{"empty quoted key", `""`, `{}`, 400, idempotency.ProblemInvalidKey},
				{"reused with another payload", "key-1", `{"amount":999}`, 422, idempotency.ProblemKeyReused},
			} {
				r := post(t, srv.URL, tc.key, tc.body)
				if r.status != tc.status || problemType(t, r) != tc.typ {
					t.Errorf("%s: %d %s, want %d %s", tc.name, r.status, r.body, tc.status, tc.typ)
				}
			}
			if r := send(t, http.MethodGet, srv.URL, "", ""); r.status != 200 || r.body != "listing" {
				t.Fatalf("GET without a key = %+v", r)
			}
			if got := h.charges.Load(); got != 1 {
				t.Fatalf("%d charges, want 1", got)
			}

			// A duplicate while the first is running: 409 with Retry-After.
			h.started, h.block = make(chan struct{}, 1), make(chan struct{})
			done := make(chan response)
			go func() { done <- post(t, srv.URL, "key-2", `{"amount":5}`) }()
			<-h.started
			dup := post(t, srv.URL, "key-2", `{"amount":5}`)
			if dup.status != 409 || problemType(t, dup) != idempotency.ProblemInFlight || dup.header.Get("Retry-After") == "" {
				t.Fatalf("duplicate in flight = %+v", dup)
			}
			close(h.block)
			if r := <-done; r.status != 201 {
				t.Fatalf("first of key-2 = %+v", r)
			}
			h.started, h.block = nil, nil
		})
	}
}

func TestMiddlewareDuplicatesInParallel(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, idempotency.Migrations()...)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE charges (id serial PRIMARY KEY, body text)`); err != nil {
		t.Fatal(err)
	}
	h := &chargeHandler{}
	srv := httptest.NewServer(newMiddleware(t, newPostgres(t, db, nil), global)(h))
	defer srv.Close()
	var wg sync.WaitGroup
	bodies := make(chan string, 12)
	for range 12 {
		wg.Go(func() {
			r := post(t, srv.URL, "same", `{"amount":1}`)
			switch r.status {
			case 201:
				bodies <- r.body
			case 409:
			default:
				t.Errorf("status %d: %s", r.status, r.body)
			}
		})
	}
	wg.Wait()
	close(bodies)
	for b := range bodies {
		if b != `{"charge":1,"request":{"amount":1}}` {
			t.Errorf("answer %s", b)
		}
	}
	var n int
	db.Pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&n)
	if n != 1 || h.charges.Load() != 1 {
		t.Fatalf("%d charge rows, %d handler runs; want 1", n, h.charges.Load())
	}
}

func TestMiddlewareExpiredKey(t *testing.T) {
	t.Parallel()
	c := &clock.Manual{}
	store, _ := idempotency.NewMemory(&idempotency.MemoryConfig{Clock: c, Retention: time.Hour})
	h := &chargeHandler{}
	srv := httptest.NewServer(newMiddleware(t, store, global)(h))
	defer srv.Close()
	if r := post(t, srv.URL, "old", `{}`); r.status != 201 {
		t.Fatal(r)
	}
	c.Advance(2 * time.Hour)
	if _, err := store.Purge(ctx, 100); err != nil {
		t.Fatal(err)
	}
	r := post(t, srv.URL, "old", `{}`)
	if r.status != 422 || problemType(t, r) != idempotency.ProblemExpired || h.charges.Load() != 1 {
		t.Fatalf("late retry = %+v, %d charges", r, h.charges.Load())
	}
}

// Responses that the handler marks as not processed (5xx by default) leave
// the key free for a retry, and so does one that is also over the size cap,
// which cannot be sent whole: a 500 stands in for it.
func TestMiddlewareUnstoredResponses(t *testing.T) {
	t.Parallel()
	store, _ := idempotency.NewMemory(nil)
	var calls atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			http.Error(w, "upstream down", http.StatusBadGateway)
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(strings.Repeat("x", 64)))
		default:
			w.Write([]byte("ok"))
		}
	})
	srv := httptest.NewServer(newMiddleware(t, store, idempotency.MiddlewareConfig{GlobalScope: true, MaxResponseBody: 32})(handler))
	defer srv.Close()
	if r := post(t, srv.URL, "k", ""); r.status != 502 || !strings.Contains(r.body, "upstream down") {
		t.Fatalf("first = %+v", r)
	}
	if r := post(t, srv.URL, "k", ""); r.status != 500 || problemType(t, r) != idempotency.ProblemInternal {
		t.Fatalf("oversized 503 = %+v", r)
	}
	if r := post(t, srv.URL, "k", ""); r.status != 200 || r.body != "ok" {
		t.Fatalf("third = %+v", r)
	}
	if r := post(t, srv.URL, "k", ""); r.status != 200 || r.body != "ok" || r.header.Get(idempotency.HeaderReplayed) != "true" || calls.Load() != 3 {
		t.Fatalf("replay = %+v after %d calls", r, calls.Load())
	}
}

func TestParseKeyHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   []string
		want string
		ok   bool
	}{
		{[]string{"abc-123"}, "abc-123", true},
		{[]string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{[]string{`"a \"quoted\" key\\"`}, `a "quoted" key\`, true},
		{[]string{`"k";foo=1`}, "k", true},
		{[]string{`"with space"`}, "with space", true},
		{[]string{"a", "b"}, "", false},
		{[]string{""}, "", false},
		{[]string{"raw with space"}, "", false},
		{[]string{`"bad\escape"`}, "", false},
		{[]string{`"trailing"x`}, "", false},
		{[]string{strings.Repeat("k", 256)}, "", false},
		{[]string{strings.Repeat("k", 255)}, strings.Repeat("k", 255), true},
	} {
		got, err := idempotency.ParseKeyHeader(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseKeyHeader(%q) = %q, %v", tc.in, got, err)
		}
	}
}

// The handler of a leased executor finds its attempt, with a derived key
// that stays the same across attempts.
func TestMiddlewareLeasedAttempt(t *testing.T) {
	t.Parallel()
	store, _ := idempotency.NewMemory(nil)
	leased, _ := idempotency.NewLeased(store, nil)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := idempotency.AttemptFrom(r.Context())
		if !ok {
			http.Error(w, "no attempt", 500)
			return
		}
		fmt.Fprint(w, a.DeriveKey("provider"))
	})
	mw := newMiddleware(t, leased, idempotency.MiddlewareConfig{GlobalScope: true})
	srv := httptest.NewServer(mw(handler))
	defer srv.Close()
	r := post(t, srv.URL, "k", "")
	want := idempotency.DeriveKey(idempotency.Key{ID: "k"}, "provider")
	if r.status != 200 || r.body != want {
		t.Fatalf("leased handler = %+v, want derived key %s", r, want)
	}
}
