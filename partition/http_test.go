package partition_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
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

// secret is the fleet's ForwardConfig.Secret in the tests.
var secret = []byte("0123456789abcdef0123456789abcdef")

// forwardFleet starts members a and b in store, each behind an HTTP server
// running Forward (the key is the query's "key") with fcfg, whose serve
// answers with the serving member, the partition, the epoch and the
// ForwardedHeader serve sees. It waits until both own their share.
func forwardFleet(t *testing.T, store partition.Membership, fcfg *partition.ForwardConfig, tel *telemetrytest.Telemetry) (map[string]*partition.Member, map[string]*httptest.Server) {
	t.Helper()
	members := map[string]*partition.Member{}
	servers := map[string]*httptest.Server{}
	for _, n := range []string{"a", "b"} {
		var h atomic.Pointer[http.Handler]
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*h.Load()).ServeHTTP(w, r) }))
		t.Cleanup(srv.Close)
		cfg := testConfig
		cfg.Name, cfg.Addr, cfg.Forward = n, strings.TrimPrefix(srv.URL, "http://"), fcfg
		if n == "a" && tel != nil {
			cfg.MeterProvider = tel.Meters
		}
		m, _ := startMember(t, store, cfg)
		handler := partition.Forward(m, func(r *http.Request) string { return r.URL.Query().Get("key") },
			func(w http.ResponseWriter, r *http.Request, e partition.Epoch) {
				body, _ := io.ReadAll(r.Body)
				w.Header().Set("X-Served-By", e.Owner)
				fmt.Fprintf(w, "partition %d epoch %d body %q forwarded by %q", e.Partition, e.Token, body, r.Header.Get(partition.ForwardedHeader))
			})
		h.Store(&handler)
		members[n], servers[n] = m, srv
	}
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
	return members, servers
}

// keyOwnedBy returns a key that m's ring places on owner.
func keyOwnedBy(m *partition.Member, owner string) string {
	for i := 0; ; i++ {
		key := fmt.Sprintf("k%d", i)
		if o, _ := m.Owner(key); o == owner {
			return key
		}
	}
}

// send sends req, retrying while the answer is 503 (a member between
// leases on a loaded machine) unless want503, and returns the answer.
func send(t *testing.T, req *http.Request, want503 bool) (*http.Response, string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.DefaultClient.Do(req.Clone(req.Context()))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want503 || resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return resp, string(body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A request for a key that another member owns is proxied to it once; the
// owner serves it on the key's executor, and serve sees the forwarding
// member's name. Member a's metrics count each forward and the not-owner
// refusal behind it.
func TestForward(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			telA := telemetrytest.New(t)
			members, servers := forwardFleet(t, b.new(t), &partition.ForwardConfig{Secret: secret}, telA)
			var forwarded int64
			for i := range 20 {
				key := fmt.Sprintf("k%d", i)
				owner, _ := members["a"].Owner(key)
				if owner == "b" {
					forwarded++
				}
				req, _ := http.NewRequest("POST", servers["a"].URL+"/?key="+key, strings.NewReader("payload "+key))
				resp, body := send(t, req, false)
				if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Served-By") != owner {
					t.Fatalf("%s: %d served by %q: %s; want %s", key, resp.StatusCode, resp.Header.Get("X-Served-By"), body, owner)
				}
				wantFwd := map[bool]string{true: `body "payload %s" forwarded by ""`, false: `body "payload %s" forwarded by "a"`}[owner == "a"]
				wantFwd = fmt.Sprintf(wantFwd, key)
				if !strings.HasSuffix(body, wantFwd) {
					t.Fatalf("%s: %s, want %s", key, body, wantFwd)
				}
			}
			notOwner := attribute.String(telemetry.Cause, "not_owner")
			if f, r := telA.Sum(t, "lockfree.partition.forwards"), telA.Sum(t, "lockfree.partition.calls.refused", notOwner); forwarded == 0 || f < forwarded || r < forwarded {
				t.Errorf("a forwarded %d requests; counted %d forwards and %d not-owner refusals\n%s", forwarded, f, r, telA.Describe(t))
			}
			// A request that a peer forwarded and that reaches a non-owner
			// is not forwarded again: 503, naming nothing of the fleet.
			key := keyOwnedBy(members["a"], "b")
			req, _ := http.NewRequest("GET", servers["a"].URL+"/?key="+key, nil)
			req.Header.Set(partition.ForwardedHeader, partition.SignForward(members["b"], req, time.Now()))
			resp, body := send(t, req, true)
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("bounced request: %d %s", resp.StatusCode, body)
			}
			assertGenericProblem(t, resp, body, http.StatusServiceUnavailable, servers)
		})
	}
}

// assertGenericProblem fails unless the answer is an application/problem+json
// body with status that names no member, address, partition or key.
func assertGenericProblem(t *testing.T, resp *http.Response, body string, status int, servers map[string]*httptest.Server) {
	t.Helper()
	var p struct {
		Status int    `json:"status"`
		Title  string `json:"title"`
	}
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal([]byte(body), &p) != nil || p.Status != status {
		t.Fatalf("answer %d %q %s, want a %d problem", resp.StatusCode, resp.Header.Get("Content-Type"), body, status)
	}
	for _, leak := range []string{`"a"`, `"b"`, "solo", "partition ", "key", "127.0.0.1"} {
		if strings.Contains(body, leak) {
			t.Fatalf("the answer shows %s: %s", leak, body)
		}
	}
	for _, srv := range servers {
		if port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]; strings.Contains(body, port) {
			t.Fatalf("the answer shows a member's port: %s", body)
		}
	}
}

// A client cannot pass for a member: a ForwardedHeader it sends — a bare
// name, or a signature made with another secret, too long ago, or for
// another request — is not honoured. Member a forwards the request as
// usual, and serve sees the name of the member that really forwarded it,
// or no header.
func TestForwardIgnoresForgedHeader(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.new(t)
			members, servers := forwardFleet(t, store, &partition.ForwardConfig{Secret: secret}, nil)
			otherCfg := testConfig
			otherCfg.Name, otherCfg.Forward = "b", &partition.ForwardConfig{Secret: []byte("another secret of thirty-two bytes")}
			impostor, err := partition.NewMember(store, &otherCfg) // never started: it only signs
			if err != nil {
				t.Fatal(err)
			}
			forged := map[string]func(r *http.Request) string{
				"bare name":    func(*http.Request) string { return "b" },
				"other secret": func(r *http.Request) string { return partition.SignForward(impostor, r, time.Now()) },
				"stale": func(r *http.Request) string {
					return partition.SignForward(members["b"], r, time.Now().Add(-2*time.Minute))
				},
				"future": func(r *http.Request) string {
					return partition.SignForward(members["b"], r, time.Now().Add(2*time.Minute))
				},
				"another path": func(r *http.Request) string {
					r2 := r.Clone(ctx)
					r2.URL.Path = "/other"
					return partition.SignForward(members["b"], r2, time.Now())
				},
				"another method": func(r *http.Request) string {
					r2 := r.Clone(ctx)
					r2.Method = "POST"
					return partition.SignForward(members["b"], r2, time.Now())
				},
			}
			for name, forge := range forged {
				for owner, wantFwd := range map[string]string{"b": `forwarded by "a"`, "a": `forwarded by ""`} {
					key := keyOwnedBy(members["a"], owner)
					req, _ := http.NewRequest("GET", servers["a"].URL+"/?key="+key, nil)
					req.Header.Set(partition.ForwardedHeader, forge(req))
					resp, body := send(t, req, false)
					if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Served-By") != owner || !strings.HasSuffix(body, wantFwd) {
						t.Fatalf("%s, key of %s: %d served by %q: %s; want %s", name, owner, resp.StatusCode, resp.Header.Get("X-Served-By"), body, wantFwd)
					}
				}
			}
		})
	}
}

// Without a Secret, members cannot recognise each other: Forward proxies
// nothing (a key another member owns gets a 503 that names nothing), and
// serve never sees a ForwardedHeader.
func TestForwardWithoutSecretProxiesNothing(t *testing.T) {
	t.Parallel()
	members, servers := forwardFleet(t, newMemory(nil), nil, nil)
	req, _ := http.NewRequest("GET", servers["a"].URL+"/?key="+keyOwnedBy(members["a"], "b"), nil)
	resp, body := send(t, req, true)
	assertGenericProblem(t, resp, body, http.StatusServiceUnavailable, servers)
	req, _ = http.NewRequest("GET", servers["a"].URL+"/?key="+keyOwnedBy(members["a"], "a"), nil)
	req.Header.Set(partition.ForwardedHeader, "b")
	if resp, body := send(t, req, false); resp.StatusCode != http.StatusOK || !strings.HasSuffix(body, `forwarded by ""`) {
		t.Fatalf("own key with a ForwardedHeader: %d %s", resp.StatusCode, body)
	}
}

// An error behind a 500 (here the request's context ended with a cause that
// names an internal host) goes to the Logger, not to the client.
func TestForwardErrorShowsNothingInternal(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	cfg := testConfig
	cfg.Name, cfg.Logger = "solo", slog.New(slog.NewTextHandler(&logs, nil))
	m, _ := startMember(t, newMemory(nil), cfg)
	forward := partition.Forward(m, func(r *http.Request) string { return "k" },
		func(w http.ResponseWriter, r *http.Request, e partition.Epoch) { fmt.Fprint(w, "served") })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancelCause(r.Context())
		cancel(errors.New("db-7.internal:5432 refused the connection"))
		forward.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, body := send(t, req, false)
	assertGenericProblem(t, resp, body, http.StatusInternalServerError, nil)
	if strings.Contains(body, "db-7") {
		t.Fatalf("the answer shows the error: %s", body)
	}
	if !strings.Contains(logs.String(), "db-7.internal") {
		t.Fatalf("the error was not logged: %s", logs.String())
	}
}

// notingBody calls waiting when a Read begins after some of the body has
// been read: the reader now waits for the client.
type notingBody struct {
	io.ReadCloser
	read    int
	waiting func()
}

func (b *notingBody) Read(p []byte) (int, error) {
	if b.read > 0 {
		b.waiting()
	}
	n, err := b.ReadCloser.Read(p)
	b.read += n
	return n, err
}

// keyInPartitionOf returns a key other than key in key's partition on m.
func keyInPartitionOf(m *partition.Member, key string) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("k%d", i)
		if k != key && m.Partition(k) == m.Partition(key) {
			return k
		}
	}
}

// rawPost sends a POST for key over a new TCP connection with the given
// Content-Length and the first bytes of the body, and returns the
// connection to send the rest and read the answer.
func rawPost(t *testing.T, srv *httptest.Server, key string, length int, first string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /?key=%s HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n%s", key, length, first)
	return conn
}

// readAnswer reads the HTTP answer on conn, for at most 30s.
func readAnswer(t *testing.T, conn net.Conn) (*http.Response, string) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// A client that sends its body slowly holds no executor: while it is still
// sending, a request for another key of the same partition is served; the
// slow request is served once its body has arrived.
func TestForwardSlowBodyHoldsNoExecutor(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig
			cfg.Name, cfg.Forward = "solo", &partition.ForwardConfig{RequestBodyTimeout: time.Minute}
			m, _ := startMember(t, b.new(t), cfg)
			slow := "slow"
			fast := keyInPartitionOf(m, slow)
			reading := make(chan struct{})
			var once sync.Once
			forward := partition.Forward(m, func(r *http.Request) string { return r.URL.Query().Get("key") },
				func(w http.ResponseWriter, r *http.Request, e partition.Epoch) {
					body, _ := io.ReadAll(r.Body)
					fmt.Fprintf(w, "%s", body)
				})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("key") == slow {
					r.Body = &notingBody{ReadCloser: r.Body, waiting: func() { once.Do(func() { close(reading) }) }}
				}
				forward.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			if err := doOwned(m, slow, func(context.Context, partition.Epoch) error { return nil }); err != nil {
				t.Fatal(err)
			}
			conn := rawPost(t, srv, slow, 2, "x") // one byte of two
			select {
			case <-reading:
			case <-time.After(30 * time.Second):
				t.Fatal("the slow body was never read")
			}
			client := &http.Client{Timeout: 30 * time.Second}
			for deadline := time.Now().Add(30 * time.Second); ; {
				resp, err := client.Post(srv.URL+"/?key="+fast, "text/plain", strings.NewReader("fast"))
				if err != nil {
					t.Fatalf("a request for another key of the partition, while a client sends its body slowly: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond) // between leases on a loaded machine
					continue
				}
				if resp.StatusCode != http.StatusOK || string(body) != "fast" {
					t.Fatalf("the other key: %d %s", resp.StatusCode, body)
				}
				break
			}
			io.WriteString(conn, "y")
			resp, body := readAnswer(t, conn)
			if resp.StatusCode != http.StatusOK || body != "xy" {
				if resp.StatusCode != http.StatusServiceUnavailable {
					t.Fatalf("the slow request: %d %s, want 200 xy", resp.StatusCode, body)
				}
				t.Logf("the slow request found the partition moving: %d", resp.StatusCode) // a late heartbeat
			}
		})
	}
}

// Forward reads the body before serve is queued, and refuses one that is
// too large (413) or too slow (408) with a problem answer; serve does not
// run. A body within the limit reaches serve whole, chunked or not.
func TestForwardBodyLimits(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig
			cfg.Name = "solo"
			cfg.Forward = &partition.ForwardConfig{MaxRequestBody: 16, RequestBodyTimeout: 100 * time.Millisecond}
			var ran atomic.Int64
			_, srv := serveAlone(t, b.new(t), cfg, func(w http.ResponseWriter, r *http.Request, e partition.Epoch) {
				ran.Add(1)
				body, _ := io.ReadAll(r.Body)
				fmt.Fprintf(w, "%s", body)
			})
			post := func(body io.Reader) (*http.Response, string) {
				req, _ := http.NewRequest("POST", srv.URL, body)
				return send(t, req, false)
			}
			sixteen := strings.Repeat("x", 16)
			chunked := func(s string) io.Reader { return io.MultiReader(strings.NewReader(s)) } // no length: chunked
			for name, body := range map[string]io.Reader{"sized": strings.NewReader(sixteen), "chunked": chunked(sixteen)} {
				if resp, got := post(body); resp.StatusCode != http.StatusOK || got != sixteen {
					t.Fatalf("%s body at the limit: %d %q", name, resp.StatusCode, got)
				}
			}
			served := ran.Load()
			for _, body := range []io.Reader{strings.NewReader(sixteen + "x"), chunked(sixteen + "x")} {
				resp, got := post(body)
				assertGenericProblem(t, resp, got, http.StatusRequestEntityTooLarge, nil)
			}
			resp, got := readAnswer(t, rawPost(t, srv, "k", 1<<30, "")) // announced too large: not read
			assertGenericProblem(t, resp, got, http.StatusRequestEntityTooLarge, nil)
			resp, got = readAnswer(t, rawPost(t, srv, "k", 2, "x")) // the second byte never comes
			assertGenericProblem(t, resp, got, http.StatusRequestTimeout, nil)
			if n := ran.Load(); n != served {
				t.Fatalf("serve ran %d times for refused bodies", n-served)
			}
		})
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
