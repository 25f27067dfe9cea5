package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lockfree-go/lockfree/idempotency"
)

// statusOnce answers each key's first request with the status in the
// X-Status header, and every later one with 201.
type statusOnce struct {
	mu   sync.Mutex
	runs map[string]int
}

func (h *statusOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	k := r.Header.Get(idempotency.HeaderKey)
	h.runs[k]++
	n := h.runs[k]
	h.mu.Unlock()
	status := http.StatusCreated
	if n == 1 {
		fmt.Sscan(r.Header.Get("X-Status"), &status)
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, "run %d", n)
}

func withStatus(t *testing.T, url, key string, status int) response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	req.Header.Set(idempotency.HeaderKey, key)
	req.Header.Set("X-Status", fmt.Sprint(status))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b [64]byte
	n, _ := resp.Body.Read(b[:])
	return response{resp.StatusCode, resp.Header, string(b[:n])}
}

// Only answers for which the handler really finished are stored: a retry
// after an authentication failure, a conflict or a rate limit runs again.
func TestMiddlewareStoresOnlyFinishedAnswers(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]idempotency.MiddlewareConfig{
		"default": global,
		"hook":    {GlobalScope: true, Stored: func(s int) bool { return s == 429 || idempotency.DefaultStored(s) }},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store, _ := idempotency.NewMemory(nil)
			srv := httptest.NewServer(newMiddleware(t, store, cfg)(&statusOnce{runs: map[string]int{}}))
			defer srv.Close()
			for _, status := range []int{200, 201, 204, 303, 400, 401, 403, 404, 408, 409, 410, 422, 425, 429, 500, 503} {
				key := fmt.Sprint("k-", status)
				if r := withStatus(t, srv.URL, key, status); r.status != status {
					t.Fatalf("first with %d = %+v", status, r)
				}
				stored := status < 500
				switch status {
				case 401, 403, 408, 409, 425, 429:
					stored = name == "hook" && status == 429
				}
				r := withStatus(t, srv.URL, key, status)
				replayed := r.header.Get(idempotency.HeaderReplayed) == "true"
				if replayed != stored || stored && r.status != status || !stored && (r.status != 201 || r.body != "run 2") {
					t.Errorf("retry after %d = %d %q (replayed %v), want stored %v", status, r.status, r.body, replayed, stored)
				}
			}
		})
	}
}

// An informational answer (103 Early Hints) passes through to the client; the
// final answer is what is stored and replayed.
func TestMiddlewareInformationalStatusPassesThrough(t *testing.T) {
	t.Parallel()
	store, _ := idempotency.NewMemory(nil)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created")
	})
	srv := httptest.NewServer(newMiddleware(t, store, global)(handler))
	defer srv.Close()
	for i, wantReplay := range []bool{false, true} {
		var hints []string
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			hints = append(hints, fmt.Sprint(code, " ", h.Get("Link")))
			return nil
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, srv.URL, nil)
		req.Header.Set(idempotency.HeaderKey, "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		replayed := resp.Header.Get(idempotency.HeaderReplayed) == "true"
		if resp.StatusCode != 201 || string(body) != "created" || replayed != wantReplay || resp.Header.Get("Link") != "" {
			t.Fatalf("request %d = %d %q %v, want 201 created (replayed %v)", i, resp.StatusCode, body, resp.Header, wantReplay)
		}
		if want := []string{"103 </style.css>; rel=preload"}; !wantReplay && fmt.Sprint(hints) != fmt.Sprint(want) {
			t.Fatalf("informational answers %q, want %q", hints, want)
		}
	}
}

// A handler that answers with a status that is not a final HTTP status ran
// to the end, but its answer cannot be stored: the client gets the
// lost-response problem, stored in its place, and the retry gets it again
// without running the handler.
func TestMiddlewareRefusesInvalidStatus(t *testing.T) {
	t.Parallel()
	for _, bad := range []int{42, 101, 600, 999} {
		t.Run(fmt.Sprint(bad), func(t *testing.T) {
			t.Parallel()
			store, _ := idempotency.NewMemory(nil)
			var runs atomic.Int64
			var reported atomic.Int64
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					w.WriteHeader(bad)
				}
				io.WriteString(w, "ok")
			})
			cfg := idempotency.MiddlewareConfig{GlobalScope: true, OnError: func(*http.Request, error) { reported.Add(1) }}
			srv := httptest.NewServer(newMiddleware(t, store, cfg)(handler))
			defer srv.Close()
			first := post(t, srv.URL, "k", "")
			if first.status != 500 || problemType(t, first) != idempotency.ProblemResponseLost || reported.Load() != 1 {
				t.Fatalf("status %d from the handler = %+v, %d errors reported", bad, first, reported.Load())
			}
			if r := post(t, srv.URL, "k", ""); r.status != 500 || r.body != first.body || r.header.Get(idempotency.HeaderReplayed) != "true" || runs.Load() != 1 {
				t.Fatalf("retry = %+v after %d runs, want the first answer replayed", r, runs.Load())
			}
		})
	}
}

// A stored result whose status is no final HTTP status (written by other
// code through the store) is answered with 500, never a panic.
func TestMiddlewareReplayOfInvalidStatus(t *testing.T) {
	t.Parallel()
	store, _ := idempotency.NewMemory(nil)
	for _, status := range []int{0, 42, 103, 1000} {
		key := idempotency.Key{ID: fmt.Sprint("k-", status)}
		if _, err := store.Do(ctx, key, idempotency.Fingerprint{}, func(context.Context) (idempotency.Result, error) {
			return idempotency.Result{Status: status, Body: []byte("stored")}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := idempotency.MiddlewareConfig{GlobalScope: true,
		Fingerprint: func(*http.Request, []byte) idempotency.Fingerprint { return idempotency.Fingerprint{} }}
	srv := httptest.NewServer(newMiddleware(t, store, cfg)(http.NotFoundHandler()))
	defer srv.Close()
	for _, status := range []int{0, 42, 103, 1000} {
		if r := post(t, srv.URL, fmt.Sprint("k-", status), ""); r.status != 500 || problemType(t, r) != idempotency.ProblemInternal {
			t.Errorf("replay of stored status %d = %+v, want 500", status, r)
		}
	}
}
