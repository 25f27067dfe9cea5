package partition_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/partition"
)

// A request for a key that another member owns is proxied to it once; the
// owner serves it on the key's executor. Member a's metrics count each
// forward and the not-owner refusal behind it.
func TestForward(t *testing.T) {
	t.Parallel()
	store := newMemory(nil)
	telA := telemetrytest.New(t)
	names := []string{"a", "b"}
	members := map[string]*partition.Member{}
	servers := map[string]*httptest.Server{}
	for _, n := range names {
		var h atomic.Pointer[http.Handler]
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*h.Load()).ServeHTTP(w, r) }))
		t.Cleanup(srv.Close)
		cfg := testConfig
		cfg.Name, cfg.Addr = n, strings.TrimPrefix(srv.URL, "http://")
		if n == "a" {
			cfg.MeterProvider = telA.Meters
		}
		m, _ := startMember(t, store, cfg)
		handler := partition.Forward(m, func(r *http.Request) string { return r.URL.Query().Get("key") },
			func(w http.ResponseWriter, r *http.Request, e partition.Epoch) {
				w.Header().Set("X-Served-By", e.Owner)
				fmt.Fprintf(w, "partition %d epoch %d forwarded by %q", e.Partition, e.Token, r.Header.Get(partition.ForwardedHeader))
			})
		h.Store(&handler)
		members[n], servers[n] = m, srv
	}
	// Wait until both members agree and own their share.
	waitFor(t, 30*time.Second, func() bool {
		for _, m := range members {
			r := m.Ring()
			want := 0
			for p := range r.Partitions() {
				if r.Owner(p) == m.Name() {
					want++
				}
			}
			if len(r.Members()) != 2 || len(m.Owned()) != want {
				return false
			}
		}
		return true
	})
	var forwarded int64
	for i := range 20 {
		key := fmt.Sprintf("k%d", i)
		owner, _ := members["a"].Owner(key)
		if owner == "b" {
			forwarded++
		}
		resp, err := http.Get(servers["a"].URL + "/?key=" + key)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Served-By") != owner {
			t.Fatalf("%s: %d served by %q: %s; want %s", key, resp.StatusCode, resp.Header.Get("X-Served-By"), body, owner)
		}
		wantFwd := map[bool]string{true: `forwarded by ""`, false: `forwarded by "a"`}[owner == "a"]
		if !strings.HasSuffix(string(body), wantFwd) {
			t.Fatalf("%s: %s, want %s", key, body, wantFwd)
		}
	}
	notOwner := attribute.String(telemetry.Cause, "not_owner")
	if f, r := telA.Sum(t, "lockfree.partition.forwards"), telA.Sum(t, "lockfree.partition.calls.refused", notOwner); forwarded == 0 || f != forwarded || r != forwarded {
		t.Errorf("a forwarded %d requests; counted %d forwards and %d not-owner refusals\n%s", forwarded, f, r, telA.Describe(t))
	}
	// A forwarded request that reaches a non-owner is not forwarded again.
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprintf("k%d", i)
		if o, _ := members["a"].Owner(key); o == "b" {
			break
		}
	}
	req, _ := http.NewRequest("GET", servers["a"].URL+"/?key="+key, nil)
	req.Header.Set(partition.ForwardedHeader, "b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("bounced request: %d", resp.StatusCode)
	}
}

// A handler that panics on the executor gets a 500 problem response, without
// the panic's value (which goes to the Logger); the process and the executor
// live on.
func TestForwardPanicIs500(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	cfg := testConfig
	cfg.Name, cfg.Logger = "solo", slog.New(slog.NewTextHandler(&logs, nil))
	m, _ := startMember(t, newMemory(nil), cfg)
	srv := httptest.NewServer(partition.Forward(m, func(r *http.Request) string { return "k" },
		func(w http.ResponseWriter, r *http.Request, e partition.Epoch) {
			if r.URL.Query().Has("panic") {
				panic("secret detail")
			}
			fmt.Fprint(w, "served")
		}))
	t.Cleanup(srv.Close)
	resp, body := getServed(t, srv.URL+"/?panic")
	var p struct {
		Status int    `json:"status"`
		Title  string `json:"title"`
	}
	if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal(body, &p) != nil || p.Status != http.StatusInternalServerError {
		t.Fatalf("panicking handler: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if strings.Contains(string(body), "secret") {
		t.Fatalf("the response shows the panic: %s", body)
	}
	if !strings.Contains(logs.String(), "secret detail") {
		t.Fatalf("the panic was not logged: %s", logs.String())
	}
	resp, body = getServed(t, srv.URL+"/")
	if resp.StatusCode != http.StatusOK || string(body) != "served" {
		t.Fatalf("after the panic: %d %s", resp.StatusCode, body)
	}
}

// serveAlone starts a member alone in store under cfg, and an HTTP server
// for Forward(m, key "k" or the query's key, serve).
func serveAlone(t *testing.T, store partition.Membership, cfg partition.Config, serve func(http.ResponseWriter, *http.Request, partition.Epoch)) (*partition.Member, *httptest.Server) {
	t.Helper()
	m, _ := startMember(t, store, cfg)
	srv := httptest.NewServer(partition.Forward(m, func(r *http.Request) string {
		if k := r.URL.Query().Get("key"); k != "" {
			return k
		}
		return "k"
	}, serve))
	t.Cleanup(srv.Close)
	return m, srv
}

// Informational answers (103 Early Hints) reach the client as such, with
// the headers the handler had set then; the final status is the handler's.
func TestForwardPassesInformationalResponses(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig
			cfg.Name = "solo"
			_, srv := serveAlone(t, b.new(t), cfg, func(w http.ResponseWriter, r *http.Request, e partition.Epoch) {
				w.Header().Set("Link", "</style.css>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				w.Header().Del("Link")
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "created")
			})
			for deadline := time.Now().Add(30 * time.Second); ; {
				var hints []string
				trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					hints = append(hints, fmt.Sprint(code, " ", h.Get("Link")))
					return nil
				}}
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, srv.URL, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond) // between leases on a loaded machine
					continue
				}
				if resp.StatusCode != http.StatusCreated || string(body) != "created" || resp.Header.Get("Link") != "" {
					t.Fatalf("answer = %d %q %v, want 201 created without Link", resp.StatusCode, body, resp.Header)
				}
				if want := []string{"103 </style.css>; rel=preload"}; fmt.Sprint(hints) != fmt.Sprint(want) {
					t.Fatalf("informational answers %q, want %q", hints, want)
				}
				return
			}
		})
	}
}

// A handler that writes a status net/http refuses (42) gets a 500 problem
// answer, as a panic does, instead of breaking the connection.
func TestForwardInvalidStatusIs500(t *testing.T) {
	t.Parallel()
	cfg := testConfig
	cfg.Name = "solo"
	_, srv := serveAlone(t, newMemory(nil), cfg, func(w http.ResponseWriter, r *http.Request, e partition.Epoch) {
		w.WriteHeader(42)
	})
	resp, body := getServed(t, srv.URL)
	if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status 42 from the handler: %d %s", resp.StatusCode, body)
	}
}

// getServed GETs url until the answer is not 503: on a loaded machine the
// member may be between leases for a moment.
func getServed(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return resp, body
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
