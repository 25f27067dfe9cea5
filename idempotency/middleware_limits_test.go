package idempotency_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lockfree-go/lockfree/idempotency"
)

// echo answers 200 with the request body it read, in two writes.
type echo struct{ runs atomic.Int64 }

func (h *echo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.runs.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	half := len(body) / 2
	w.Write(body[:half])
	w.Write(body[half:])
}

// serve sends one request with key and body to h and returns the answer.
func serve(h http.Handler, key string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/pay", bytes.NewReader(body))
	req.Header.Set(idempotency.HeaderKey, key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// limitsCase checks one pair of limits: the handler reads the whole body
// when it fits MaxRequestBody (413 otherwise, and the handler does not
// run), its answer is stored when it fits MaxResponseBody (the
// lost-response problem otherwise), a retry replays, and the key reused
// with another payload gets 422. It returns what went wrong, or nil.
func limitsCase(reqLimit, respLimit int64, body, other []byte) error {
	store, _ := idempotency.NewMemory(nil)
	h := &echo{}
	mw, err := idempotency.NewMiddleware(store, h, &idempotency.MiddlewareConfig{GlobalScope: true,
		MaxRequestBody: reqLimit, MaxResponseBody: int(respLimit)})
	if reqLimit < 0 || respLimit < 0 {
		if !errors.Is(err, idempotency.ErrInvalid) {
			return fmt.Errorf("NewMiddleware with a negative limit: %v, want ErrInvalid", err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	fits := func(n int, limit int64) bool {
		if limit == 0 {
			limit = 1 << 20 // the documented default
		}
		return int64(n) <= limit
	}
	first := serve(mw, "k", body)
	switch {
	case !fits(len(body), reqLimit):
		if first.Code != http.StatusRequestEntityTooLarge || h.runs.Load() != 0 {
			return fmt.Errorf("%d-byte body over MaxRequestBody %d: %d after %d runs, want 413 before the handler",
				len(body), reqLimit, first.Code, h.runs.Load())
		}
		return nil
	case !fits(len(body), respLimit):
		if first.Code != http.StatusInternalServerError || !strings.Contains(first.Body.String(), idempotency.ProblemResponseLost) {
			return fmt.Errorf("%d-byte answer over MaxResponseBody %d: %d %q, want 500 %s",
				len(body), respLimit, first.Code, first.Body, idempotency.ProblemResponseLost)
		}
	case first.Code != http.StatusOK || !bytes.Equal(first.Body.Bytes(), body):
		return fmt.Errorf("limits %d, %d: %d with %d bytes, want 200 echoing the %d-byte body",
			reqLimit, respLimit, first.Code, first.Body.Len(), len(body))
	}
	if again := serve(mw, "k", body); again.Code != first.Code || !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) ||
		again.Header().Get(idempotency.HeaderReplayed) != "true" {
		return fmt.Errorf("limits %d, %d: retry %d %q, want the first answer replayed", reqLimit, respLimit, again.Code, again.Body)
	}
	if bytes.Equal(other, body) {
		return nil
	}
	reused := serve(mw, "k", other)
	want := http.StatusUnprocessableEntity
	if !fits(len(other), reqLimit) {
		want = http.StatusRequestEntityTooLarge
	}
	if reused.Code != want || h.runs.Load() != 1 {
		return fmt.Errorf("limits %d, %d: key reused with another payload: %d after %d runs, want %d and one run",
			reqLimit, respLimit, reused.Code, h.runs.Load(), want)
	}
	return nil
}

// Any limit works, MaxInt64 ("no limit") and values near it included,
// without overflow; zero is the 1 MiB default, a negative limit is refused.
func TestMiddlewareBodyLimits(t *testing.T) {
	t.Parallel()
	body, other := []byte("hello world"), []byte("HELLO WORLD")
	n := int64(len(body))
	for _, limit := range []int64{0, 1, n - 1, n, n + 1, math.MaxInt32, 1 << 62, math.MaxInt64 / 2, math.MaxInt64/2 + 1,
		math.MaxInt64 - 1, math.MaxInt64, -1, math.MinInt64} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			t.Parallel()
			for _, c := range []struct{ req, resp int64 }{{limit, 0}, {0, limit}, {limit, limit}} {
				if err := limitsCase(c.req, c.resp, body, other); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// FuzzMiddlewareLimits checks limitsCase's properties for any pair of
// limits and payloads.
func FuzzMiddlewareLimits(f *testing.F) {
	for _, limit := range []int64{0, 1, 4, 5, 6, math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 / 2, -1, math.MinInt64} {
		f.Add(limit, int64(0), []byte("hello"), []byte("world"))
		f.Add(int64(0), limit, []byte("hello"), []byte("world"))
		f.Add(limit, limit, []byte("hello"), []byte("hello, world"))
	}
	f.Fuzz(func(t *testing.T, reqLimit, respLimit int64, body, other []byte) {
		if err := limitsCase(reqLimit, respLimit, body, other); err != nil {
			t.Fatal(err)
		}
	})
}
