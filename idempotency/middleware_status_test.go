package idempotency_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
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
			store, _ := idempotency.NewMemory(nil, nil)
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
