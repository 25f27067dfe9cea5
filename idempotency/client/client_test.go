package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/idempotency/client"
)

// server answers each request with the next status of its script (the
// last one once the script runs out) and records what every attempt
// carried.
type server struct {
	*httptest.Server
	mu       sync.Mutex
	script   []int
	header   http.Header // set on every answer
	attempts []attempt
}

type attempt struct {
	method string
	keys   []string
	body   string
}

func newServer(t *testing.T, script ...int) *server {
	t.Helper()
	s := &server{script: script, header: http.Header{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.attempts = append(s.attempts, attempt{r.Method, r.Header.Values(client.HeaderKey), string(body)})
		status := s.script[min(len(s.attempts), len(s.script))-1]
		for k, v := range s.header {
			w.Header()[k] = v
		}
		s.mu.Unlock()
		w.WriteHeader(status)
		fmt.Fprintf(w, "answer %d", status)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) seen() []attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attempt(nil), s.attempts...)
}

// fast is a configuration whose backoff does not slow the tests.
func fast(cfg client.Config) *client.Config {
	if cfg.MinDelay == 0 {
		cfg.MinDelay = time.Millisecond
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = 10 * time.Millisecond
	}
	return &cfg
}

func newClient(t *testing.T, cfg *client.Config) *http.Client {
	t.Helper()
	tr, err := client.NewTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr}
}

func post(t *testing.T, c *http.Client, url, body string, header ...string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	return c.Do(req)
}

// status returns the status of a request's answer, which it drains and
// closes, and fails t on an error.
func status(t *testing.T) func(resp *http.Response, err error) int {
	return func(resp *http.Response, err error) int {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
}

// A POST without a key gets one, a quoted UUID, and keeps it, with its
// body, through every retry that a 5xx or a 409 asks for.
func TestRetriesWithTheSameKey(t *testing.T) {
	t.Parallel()
	srv := newServer(t, 503, 409, 500, 201)
	var retries []int
	c := newClient(t, fast(client.Config{OnRetry: func(n int, resp *http.Response, err error) {
		retries = append(retries, resp.StatusCode)
	}}))
	if s := status(t)(post(t, c, srv.URL, "charge 42")); s != 201 {
		t.Fatalf("status %d, want 201", s)
	}
	got := srv.seen()
	if len(got) != 4 || fmt.Sprint(retries) != "[503 409 500]" {
		t.Fatalf("%d attempts, retries after %v; want 4 after [503 409 500]", len(got), retries)
	}
	key := got[0].keys
	if len(key) != 1 || len(key[0]) != 38 || !strings.HasPrefix(key[0], `"`) {
		t.Fatalf("key %q, want one quoted UUID", key)
	}
	if parsed, err := idempotency.ParseKeyHeader(key); err != nil || len(parsed) != 36 {
		t.Fatalf("the server side reads the key %q as %q, %v", key, parsed, err)
	}
	for i, a := range got {
		if fmt.Sprint(a.keys) != fmt.Sprint(key) || a.body != "charge 42" || a.method != http.MethodPost {
			t.Fatalf("attempt %d: %+v, want key %v and the same body", i+1, a, key)
		}
	}
	// Another request is another intent: another key.
	status(t)(post(t, c, srv.URL, "charge 43"))
	if again := srv.seen()[4].keys; fmt.Sprint(again) == fmt.Sprint(key) {
		t.Fatalf("a second request reused the key %v", key)
	}
}

// The caller's own key is kept as it is, on any method; two keys are
// refused before anything is sent.
func TestCallerKey(t *testing.T) {
	t.Parallel()
	srv := newServer(t, 503, 200)
	c := newClient(t, fast(client.Config{}))
	req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("x"))
	req.Header.Set(client.HeaderKey, "order-7")
	if s := status(t)(c.Do(req)); s != 200 {
		t.Fatalf("status %d", s)
	}
	if got := srv.seen(); len(got) != 2 || got[1].keys[0] != "order-7" || got[0].keys[0] != "order-7" {
		t.Fatalf("attempts %+v, want two with the caller's key", got)
	}
	if req.Header.Get(client.HeaderKey) != "order-7" || len(req.Header.Values(client.HeaderKey)) != 1 {
		t.Fatalf("the caller's request changed: %v", req.Header)
	}
	_, err := post(t, c, srv.URL, "x", client.HeaderKey, "a", client.HeaderKey, "b")
	if !errors.Is(err, client.ErrInvalid) || len(srv.seen()) != 2 {
		t.Fatalf("two keys: %v after %d attempts; want ErrInvalid and nothing sent", err, len(srv.seen()))
	}
}

// The Transport does not change the caller's request: its attempts are
// clones.
func TestRequestUnchanged(t *testing.T) {
	t.Parallel()
	srv := newServer(t, 500, 200)
	c := newClient(t, fast(client.Config{}))
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	status(t)(c.Do(req))
	if len(req.Header.Values(client.HeaderKey)) != 0 {
		t.Fatalf("the request now has a key: %v", req.Header)
	}
}

// It stops at an answer of the server's own: a 2xx, a 4xx (422: the key
// was used with another payload), and a replayed 5xx, the stored outcome.
func TestStopsAtAnAnswer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		status   int
		replayed bool
	}{
		{"created", 201, false},
		{"key reused", 422, false},
		{"bad request", 400, false},
		{"not found", 404, false},
		{"replayed 500", 500, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, c.status)
			if c.replayed {
				srv.header.Set(client.HeaderReplayed, "true")
			}
			cl := newClient(t, fast(client.Config{}))
			if s := status(t)(post(t, cl, srv.URL, "x")); s != c.status || len(srv.seen()) != 1 {
				t.Fatalf("status %d after %d attempts, want %d after 1", s, len(srv.seen()), c.status)
			}
		})
	}
}

// A request the Transport does not key — another method, no key — is sent
// once, whatever the answer.
func TestUnkeyedSentOnce(t *testing.T) {
	t.Parallel()
	srv := newServer(t, 503)
	c := newClient(t, fast(client.Config{}))
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		req, _ := http.NewRequest(m, srv.URL, nil)
		if s := status(t)(c.Do(req)); s != 503 {
			t.Fatalf("%s: status %d", m, s)
		}
	}
	for _, a := range srv.seen() {
		if len(a.keys) != 0 {
			t.Fatalf("%s got a key %v", a.method, a.keys)
		}
	}
	if n := len(srv.seen()); n != 3 {
		t.Fatalf("%d attempts for 3 unkeyed requests, want 3", n)
	}
}

// MaxAttempts bounds the attempts; the last answer is returned as it is.
func TestMaxAttempts(t *testing.T) {
	t.Parallel()
	srv := newServer(t, 503)
	c := newClient(t, fast(client.Config{MaxAttempts: 3}))
	if s := status(t)(post(t, c, srv.URL, "x")); s != 503 || len(srv.seen()) != 3 {
		t.Fatalf("status %d after %d attempts, want 503 after 3", s, len(srv.seen()))
	}
}

// Retry-After, in seconds or as an HTTP date, sets the wait, capped at
// MaxDelay; the request's context ends the wait.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, value string
	}{
		{"seconds", "3600"},
		{"date", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, 429, 200)
			srv.header.Set("Retry-After", c.value)
			cl := newClient(t, &client.Config{MinDelay: time.Millisecond, MaxDelay: 50 * time.Millisecond})
			start := time.Now()
			if s := status(t)(post(t, cl, srv.URL, "x")); s != 200 {
				t.Fatalf("status %d", s)
			}
			if waited := time.Since(start); waited > 30*time.Second {
				t.Fatalf("waited %v for an hour's Retry-After capped at 50ms", waited)
			}
			// Within the cap, it waits what the server asks.
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			cl = newClient(t, &client.Config{MinDelay: time.Millisecond, MaxDelay: time.Hour})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
			srv.mu.Lock()
			srv.attempts, srv.script = nil, []int{429}
			srv.mu.Unlock()
			_, err := cl.Do(req)
			if !errors.Is(err, context.DeadlineExceeded) || len(srv.seen()) != 1 {
				t.Fatalf("an hour's Retry-After under a 100ms context: %v after %d attempts; want the deadline after 1", err, len(srv.seen()))
			}
		})
	}
}

// A network error is retried with the same key: here the server's first
// attempt closes the connection without an answer.
func TestNetworkErrorRetried(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		keys []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get(client.HeaderKey))
		first := len(keys) == 1
		mu.Unlock()
		if first {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(201)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, fast(client.Config{}))
	if s := status(t)(post(t, c, srv.URL, "x")); s != 201 {
		t.Fatalf("status %d", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) < 2 || keys[0] != keys[len(keys)-1] || keys[0] == "" {
		t.Fatalf("keys of the attempts %q, want the same one", keys)
	}
}

// A body without GetBody is buffered up to MaxBufferedBody and sent again;
// a larger one is refused before anything is sent.
func TestBodyWithoutGetBody(t *testing.T) {
	t.Parallel()
	srv := newServer(t, 503, 200)
	c := newClient(t, fast(client.Config{MaxBufferedBody: 16}))
	req, _ := http.NewRequest(http.MethodPost, srv.URL, io.NopCloser(strings.NewReader("sixteen bytes ok")))
	if req.GetBody != nil {
		t.Fatal("the request has GetBody")
	}
	if s := status(t)(c.Do(req)); s != 200 {
		t.Fatalf("status %d", s)
	}
	if got := srv.seen(); len(got) != 2 || got[1].body != "sixteen bytes ok" {
		t.Fatalf("attempts %+v, want the body twice", got)
	}
	for _, body := range []io.Reader{
		io.NopCloser(strings.NewReader("seventeen bytes!!")), // length unknown
		bytes.NewBuffer(make([]byte, 17)),                    // length known, GetBody cleared below
		io.NopCloser(io.LimitReader(zeros{}, 1<<30)),         // far too long to read
		io.MultiReader(strings.NewReader("abc"), strings.NewReader("defghijklmnopqrst")),
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
		req.GetBody = nil
		_, err := c.Do(req)
		if !errors.Is(err, client.ErrBodyNotResendable) {
			t.Fatalf("a body over MaxBufferedBody without GetBody: %v, want ErrBodyNotResendable", err)
		}
	}
	if n := len(srv.seen()); n != 2 {
		t.Fatalf("%d attempts, want the 2 of the first request: nothing sent for the others", n)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestNewTransportRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []client.Config{
		{MaxAttempts: -1},
		{MinDelay: -time.Second},
		{MinDelay: time.Second, MaxDelay: time.Millisecond},
		{MaxBufferedBody: -1},
	} {
		if _, err := client.NewTransport(&cfg); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("NewTransport(%+v): %v, want ErrInvalid", cfg, err)
		}
	}
	if _, err := client.NewTransport(nil); err != nil {
		t.Fatal(err)
	}
}

// A key minted by NewKey is sent quoted; an error minting one is the
// request's error, before anything is sent.
func TestNewKey(t *testing.T) {
	t.Parallel()
	srv := newServer(t, 200)
	n := 0
	c := newClient(t, fast(client.Config{NewKey: func() (string, error) { n++; return "k" + strconv.Itoa(n), nil }}))
	status(t)(post(t, c, srv.URL, "x"))
	if got := srv.seen()[0].keys; fmt.Sprint(got) != `["k1"]` {
		t.Fatalf("key %v, want \"k1\"", got)
	}
	c = newClient(t, fast(client.Config{NewKey: func() (string, error) { return "", errors.New("no entropy") }}))
	if _, err := post(t, c, srv.URL, "x"); err == nil || len(srv.seen()) != 1 {
		t.Fatalf("a failed NewKey: %v after %d attempts, want an error and nothing sent", err, len(srv.seen()))
	}
	// A key with a quote and a backslash is escaped, and the server reads
	// it back as it was minted.
	c = newClient(t, fast(client.Config{NewKey: func() (string, error) { return `a"b\c`, nil }}))
	status(t)(post(t, c, srv.URL, "x"))
	if got, err := idempotency.ParseKeyHeader(srv.seen()[1].keys); got != `a"b\c` || err != nil {
		t.Fatalf("the server reads the minted key a\"b\\c as %q, %v", got, err)
	}
	// A key that has no structured-field form is refused before anything
	// is sent.
	for _, bad := range []string{"", strings.Repeat("k", client.MaxKeyLen+1), "caf\u00e9", "a\nb", "a\x00"} {
		c = newClient(t, fast(client.Config{NewKey: func() (string, error) { return bad, nil }}))
		if _, err := post(t, c, srv.URL, "x"); !errors.Is(err, client.ErrInvalid) || len(srv.seen()) != 2 {
			t.Fatalf("NewKey minted %q: %v after %d attempts, want ErrInvalid and nothing sent", bad, err, len(srv.seen()))
		}
	}
	if _, err := post(t, c, srv.URL, "x", client.HeaderKey, "  "); !errors.Is(err, client.ErrInvalid) || len(srv.seen()) != 2 {
		t.Fatalf("a blank caller key: %v after %d attempts, want ErrInvalid and nothing sent", err, len(srv.seen()))
	}
}
