package client_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/idempotency/client"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
)

// Retries are counted by cause, a request whose last attempt still asked
// for a retry as a give-up, and every keyed request is one span over its
// attempts; an unkeyed request is neither counted nor traced.
func TestRetriesAreCounted(t *testing.T) {
	t.Parallel()
	tel := telemetrytest.New(t)
	c := newClient(t, fast(client.Config{MaxAttempts: 2, MeterProvider: tel.Meters, TracerProvider: tel.Tracers}))
	// A 503, then 201: one retry for a status.
	status(t)(post(t, c, newServer(t, 503, 201).URL, "x"))
	// 503 twice: one retry, then a give-up.
	status(t)(post(t, c, newServer(t, 503).URL, "x"))
	// No answer, then 201: one retry for the network.
	var n atomic.Int32
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(201)
	}))
	t.Cleanup(cut.Close)
	status(t)(post(t, c, cut.URL, "x"))
	// Unkeyed: sent once, not traced.
	req, _ := http.NewRequest(http.MethodGet, newServer(t, 503).URL, nil)
	status(t)(c.Do(req))

	for cause, want := range map[string]int64{"status": 2, "network": 1} {
		if got := tel.Sum(t, "lockfree.idempotency.client.retries", attribute.String(telemetry.Cause, cause)); got != want {
			t.Errorf("retries for %s = %d, want %d\n%s", cause, got, want, tel.Describe(t))
		}
	}
	if got := tel.Sum(t, "lockfree.idempotency.client.give_ups"); got != 1 {
		t.Errorf("give-ups = %d, want 1\n%s", got, tel.Describe(t))
	}
	if spans := tel.SpansNamed("idempotency.client.RoundTrip"); len(spans) != 3 {
		t.Errorf("%d spans, want 3: one per keyed request", len(spans))
	}
}
