package idempotency_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/lockfree-go/lockfree/idempotency"
)

// FuzzParseKeyHeader checks that ParseKeyHeader never panics and accepts only
// what it documents: one value, a quoted string with \" and \\ escapes
// (parameters after it ignored) or a raw token of visible ASCII, giving a key
// of 1 to MaxKeyLen printable ASCII bytes; anything else matches ErrInvalid.
func FuzzParseKeyHeader(f *testing.F) {
	for _, seed := range []string{
		"abc-123", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `"a \"quoted\" key\\"`, `"k";foo=1`, ` "k" `,
		`"with space"`, "", " ", `""`, "raw with space", `"bad\escape"`, `"trailing"x`, `"unterminated`,
		"a\x00b", "caf\xc3\xa9", "\xff", `"\"`, `"a"b"`, `"a";`, "\t\"k\"\t", strings.Repeat("k", 256),
		strings.Repeat("k", 255), `"` + strings.Repeat(`\\`, 200) + `"`,
	} {
		f.Add(seed, false)
	}
	f.Add("k", true)
	f.Fuzz(func(t *testing.T, v string, twice bool) {
		values := []string{v}
		if twice {
			values = append(values, v)
		}
		key, err := idempotency.ParseKeyHeader(values)
		if err != nil {
			if !errors.Is(err, idempotency.ErrInvalid) || key != "" {
				t.Fatalf("ParseKeyHeader(%q) = %q, %v; want an error matching ErrInvalid", values, key, err)
			}
			return
		}
		if twice {
			t.Fatalf("ParseKeyHeader accepted two values: %q", values)
		}
		if key == "" || len(key) > idempotency.MaxKeyLen {
			t.Fatalf("ParseKeyHeader(%q) = a key of %d bytes", v, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("ParseKeyHeader(%q) = %q: byte %#x is not printable ASCII", v, key, key[i])
			}
		}
		trimmed := strings.Trim(v, " \t")
		if !strings.HasPrefix(trimmed, `"`) {
			if key != trimmed || strings.ContainsAny(key, "\" ") {
				t.Fatalf("raw ParseKeyHeader(%q) = %q, want the token itself", v, key)
			}
		}
		// The key, written back as a quoted string, reads the same.
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if again, err := idempotency.ParseKeyHeader([]string{quoted}); err != nil || again != key {
			t.Fatalf("ParseKeyHeader(%q) = %q, %v; want %q back", quoted, again, err, key)
		}
	})
}

// fuzzStatuses are the final statuses the fuzzed handler answers with.
var fuzzStatuses = []int{200, 201, 202, 303, 400, 401, 404, 409, 410, 422, 429, 500, 503}

// fuzzHandler answers with a status chosen by the request, echoes the body,
// and puts part of it in a header that is replayed: client bytes in a
// stored header. It sends 103 Early Hints first when asked.
type fuzzHandler struct{ runs atomic.Int64 }

func (h *fuzzHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := h.runs.Add(1)
	var body bytes.Buffer
	body.ReadFrom(r.Body)
	status, _ := strconv.Atoi(r.Header.Get("X-Status"))
	if r.Header.Get("X-Hints") != "" {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
	}
	name := body.Bytes()[:min(body.Len(), 16)]
	w.Header().Set("Content-Disposition", "attachment; filename="+string(name))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Location", fmt.Sprint("/orders/", n))
	w.Header().Set("X-Run", fmt.Sprint(n))
	w.WriteHeader(status)
	fmt.Fprintf(w, "run %d: ", n)
	w.Write(body.Bytes())
}

// fuzzMaxBody is the request body limit of FuzzMiddleware.
const fuzzMaxBody = 256

// FuzzMiddleware drives the middleware on the memory store with fuzzed
// keys, bodies, callers and handler statuses, and checks: no panic; no 5xx
// but the handler's own; a key is visible only in its scope (another caller
// with the same key and body runs the handler); a retry in the scope is the
// first answer byte for byte (status, body, replayed headers); another body
// in the scope gets 422, and in another scope runs the handler.
func FuzzMiddleware(f *testing.F) {
	f.Add("k", []byte(`{"amount":1}`), []byte(`{"amount":2}`), uint8(1), "mallory", false)
	f.Add(`"quoted \" key"`, []byte("a"), []byte("a"), uint8(0x80), "alice", false)
	f.Add("k", []byte("x"), []byte("y"), uint8(6), "", false)
	f.Add("k", []byte("x"), []byte("y"), uint8(10), "\xff", true)
	f.Add("", []byte(nil), []byte("y"), uint8(11), strings.Repeat("m", 300), false)
	f.Add(strings.Repeat("k", 300), []byte("x"), []byte("y"), uint8(3), "bob", false)
	f.Add("k", bytes.Repeat([]byte("b"), fuzzMaxBody+1), []byte("y"), uint8(1), "m", false)
	f.Add("k", []byte("name\r\nX-Injected: 1\x00\xe9"), []byte("z"), uint8(0x81), "m\x00", false)
	f.Fuzz(func(t *testing.T, key string, body, other []byte, choice uint8, mallory string, twoKeys bool) {
		run := newFuzzRun(t, key, twoKeys, choice)
		first, ran := run.do("alice", body)
		if !ran {
			// Refused before the handler: a bad key or an oversized body,
			// for every caller alike.
			if first.Code != 400 && first.Code != 413 {
				t.Fatalf("first request refused with %d: %s", first.Code, first.Body.Bytes())
			}
			if again, ran := run.do("bob", body); ran || again.Code != first.Code {
				t.Fatalf("bob's identical request = %d (ran %v), alice's %d", again.Code, ran, first.Code)
			}
			return
		}
		if first.Code != run.status {
			t.Fatalf("first = %d, the handler answered %d", first.Code, run.status)
		}
		run.checkRetry(first, body)
		run.checkScopes(body, other, mallory)
	})
}

// fuzzRun is one input of FuzzMiddleware: a middleware on a fresh memory
// store, in front of a fuzzHandler, and how the requests are made.
type fuzzRun struct {
	t       *testing.T
	srv     http.Handler
	h       *fuzzHandler
	key     string
	twoKeys bool
	status  int
	hints   bool
}

func newFuzzRun(t *testing.T, key string, twoKeys bool, choice uint8) *fuzzRun {
	store, _ := idempotency.NewMemory(nil)
	h := &fuzzHandler{}
	mw, err := idempotency.NewMiddleware(store, h, &idempotency.MiddlewareConfig{
		Tenant:         func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
		MaxRequestBody: fuzzMaxBody,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fuzzRun{t: t, srv: mw, h: h, key: key, twoKeys: twoKeys,
		status: fuzzStatuses[int(choice&0x7f)%len(fuzzStatuses)], hints: choice&0x80 != 0}
}

// do sends the key with body as user and reports whether the handler ran.
// A 5xx that is not the handler's fails the test.
func (f *fuzzRun) do(user string, body []byte) (*wire, bool) {
	req := httptest.NewRequest(http.MethodPost, "/orders", bytes.NewReader(body))
	req.Header[idempotency.HeaderKey] = []string{f.key}
	if f.twoKeys {
		req.Header[idempotency.HeaderKey] = []string{f.key, f.key}
	}
	req.Header["X-User"] = []string{user}
	req.Header.Set("X-Status", strconv.Itoa(f.status))
	if f.hints {
		req.Header.Set("X-Hints", "1")
	}
	before := f.h.runs.Load()
	w := &wire{header: http.Header{}}
	f.srv.ServeHTTP(w, req)
	ran := f.h.runs.Load() != before
	if w.Code >= 500 && (!ran || w.Code != f.status) && w.sent.Get(idempotency.HeaderReplayed) == "" {
		f.t.Fatalf("the middleware answered %d by itself: %s", w.Code, w.Body.Bytes())
	}
	return w, ran
}

// checkRetry checks alice's retry: the first answer again if it was stored,
// a new execution if not.
func (f *fuzzRun) checkRetry(first *wire, body []byte) {
	retry, ran := f.do("alice", body)
	if !idempotency.DefaultStored(f.status) {
		if !ran {
			f.t.Fatalf("retry of an unstored %d did not run the handler: %d", f.status, retry.Code)
		}
		return
	}
	if ran || retry.sent.Get(idempotency.HeaderReplayed) != "true" {
		f.t.Fatalf("retry of a stored %d ran the handler again (or was not marked replayed)", f.status)
	}
	sameAnswer(f.t, first, retry)
}

// checkScopes checks that alice's key is hers alone: bob's and carol's
// requests with it run the handler, whatever the body; a caller with an
// invalid name gets 400.
func (f *fuzzRun) checkScopes(body, other []byte, mallory string) {
	t := f.t
	if r, ran := f.do("bob", body); !ran || r.sent.Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("bob with alice's key and body: ran %v, %d %v; want his own execution", ran, r.Code, r.sent)
	}
	if !bytes.Equal(other, body) && len(other) <= fuzzMaxBody {
		if r, ran := f.do("alice", other); idempotency.DefaultStored(f.status) && (ran || r.Code != 422) {
			t.Fatalf("alice's key with another body: ran %v, %d; want 422", ran, r.Code)
		}
		if r, ran := f.do("carol", other); !ran || r.Code != f.status {
			t.Fatalf("carol with alice's key and another body: ran %v, %d; want her own execution", ran, r.Code)
		}
	}
	r, ran := f.do(mallory, body)
	named := mallory != "" && len(mallory) <= idempotency.MaxKeyLen && utf8.ValidString(mallory) && !strings.ContainsRune(mallory, 0)
	switch {
	case !named && (ran || r.Code != 400):
		t.Fatalf("caller %q: ran %v, %d; want 400", mallory, ran, r.Code)
	case named && !slices.Contains([]string{"alice", "bob", "carol"}, mallory) && !ran:
		t.Fatalf("caller %q did not run the handler: %d %v", mallory, r.Code, r.sent)
	}
}

// sameAnswer checks that a replay is the first answer: status, body and the
// headers the middleware replays.
func sameAnswer(t *testing.T, first, replay *wire) {
	t.Helper()
	if replay.Code != first.Code || !bytes.Equal(replay.Body.Bytes(), first.Body.Bytes()) {
		t.Fatalf("replay %d %q, first %d %q", replay.Code, replay.Body.Bytes(), first.Code, first.Body.Bytes())
	}
	for _, name := range []string{"Content-Type", "Content-Encoding", "Content-Language", "Content-Disposition", "Vary",
		"Content-Location", "Location", "Etag", "Last-Modified", "Content-Length"} {
		if a, b := first.sent[name], replay.sent[name]; fmt.Sprintf("%q", a) != fmt.Sprintf("%q", b) {
			t.Fatalf("header %s: first %q, replay %q", name, a, b)
		}
	}
}

// wire is a ResponseWriter that treats status codes as net/http's server
// does: 1xx (but 101) are informational, the first other one is final, and
// a code outside 100-999 panics.
type wire struct {
	header http.Header
	sent   http.Header // the headers as sent with the final status
	hints  []int
	Code   int
	Body   bytes.Buffer
}

func (w *wire) Header() http.Header { return w.header }

func (w *wire) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if w.Code != 0 {
		return
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.hints = append(w.hints, code)
		return
	}
	w.Code, w.sent = code, w.header.Clone()
}

func (w *wire) Write(p []byte) (int, error) {
	if w.Code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.Body.Write(p)
}
