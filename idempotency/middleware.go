package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/short"
)

// HTTP header names used by Middleware.
const (
	// HeaderKey carries the client's idempotency key (IETF draft "The
	// Idempotency-Key HTTP Header Field"), as a structured-field string
	// ("…") or a raw token.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" on a replayed response.
	HeaderReplayed = "Idempotent-Replayed"
)

// Problem types (RFC 9457) of the responses Middleware writes itself.
const (
	ProblemMissingKey = "https://pkg.go.dev/github.com/lockfree-go/lockfree/idempotency#ProblemMissingKey"
	ProblemInvalidKey = "https://pkg.go.dev/github.com/lockfree-go/lockfree/idempotency#ProblemInvalidKey"
	ProblemInFlight   = "https://pkg.go.dev/github.com/lockfree-go/lockfree/idempotency#ProblemInFlight"
	ProblemKeyReused  = "https://pkg.go.dev/github.com/lockfree-go/lockfree/idempotency#ProblemKeyReused"
	ProblemExpired    = "https://pkg.go.dev/github.com/lockfree-go/lockfree/idempotency#ProblemExpired"
	ProblemTooLarge   = "https://pkg.go.dev/github.com/lockfree-go/lockfree/idempotency#ProblemTooLarge"
	ProblemInternal   = "https://pkg.go.dev/github.com/lockfree-go/lockfree/idempotency#ProblemInternal"
)

// MiddlewareConfig configures Middleware. Exactly one of Tenant and
// GlobalScope must be set: the middleware cannot be built without saying
// whose keys a request's key is among.
type MiddlewareConfig struct {
	// Tenant names the caller that the request's key belongs to: the
	// principal (account, tenant, API client) established by the
	// authentication, which must run before the middleware. A key is
	// visible only to requests with the same name: another caller sending
	// the same key gets no replay, no 409 and no 422 from it, and runs the
	// handler. The name must be 1 to MaxKeyLen bytes of UTF-8 without NUL
	// (hash a longer principal); an error or an empty name gives 400.
	Tenant func(r *http.Request) (string, error)
	// GlobalScope puts every request's key in one scope shared by all
	// callers, instead of Tenant: any caller who sends a key that another
	// used with the same payload gets that caller's stored response. Set it
	// only when every caller may see every other caller's responses (one
	// client, or a service behind an internal gateway).
	GlobalScope bool
	// Methods are the methods that require an Idempotency-Key; requests with
	// other methods pass through untouched. Defaults to POST and PATCH (the
	// methods that are not idempotent by definition).
	Methods []string
	// Optional lets requests of Methods without a key pass through
	// unprotected instead of being refused with 400. Defaults to false.
	Optional bool
	// Fingerprint identifies the request's payload; a key reused in its
	// scope with a different fingerprint gives 422. Defaults to the method,
	// the path and query, and the body (not the headers).
	Fingerprint func(r *http.Request, body []byte) Fingerprint
	// MaxRequestBody is the largest request body read (for the
	// fingerprint); a larger one gives 413. Defaults to 1 MiB.
	MaxRequestBody int64
	// MaxResponseBody is the largest response body stored; a handler that
	// writes more gets a 500 answer and nothing is stored. Defaults to 1 MiB.
	MaxResponseBody int
	// ReplayHeaders are the response headers stored and replayed to every
	// retry of the key, besides those that describe the body, which always
	// are: Content-Type, Content-Encoding, Content-Language,
	// Content-Disposition and Vary. Defaults to Content-Location, Location,
	// ETag and Last-Modified. Every listed header is replayed to whoever retries the
	// key in its scope: never list one that carries a secret or a session.
	// Set-Cookie is never replayed (listing it is an error), nor are the
	// headers of the connection and the framing.
	ReplayHeaders []string
	// Stored says whether a response with this final status (200 to 599)
	// is stored and replayed. An unstored response is sent as it is, and
	// the key is released so that a retry runs again. Defaults to
	// DefaultStored.
	Stored func(status int) bool
	// OnError, when set, is told of errors answered with 500 and of the
	// Tenant function's errors (answered with 400, without their text).
	// Defaults to none.
	OnError func(r *http.Request, err error)
}

// bodyHeaders are the response headers that describe the body: Middleware
// always stores and replays them with it, so that a replayed body is read as
// the first one was (a gzip body stays labelled gzip).
var bodyHeaders = []string{"Content-Type", "Content-Encoding", "Content-Language", "Content-Disposition", "Vary"}

// unreplayable are the headers Middleware never stores nor replays: a
// cookie would hand one caller's session to whoever retries the key, and the
// others describe the connection or the framing, which the middleware
// writes itself.
var unreplayable = []string{"Set-Cookie", "Set-Cookie2", "Connection", "Content-Length", "Keep-Alive",
	"Proxy-Connection", "Trailer", "Transfer-Encoding", "Upgrade", HeaderReplayed}

func (c MiddlewareConfig) withDefaults() (MiddlewareConfig, error) {
	switch {
	case c.Tenant == nil && !c.GlobalScope:
		return c, fmt.Errorf("%w: invalid config: Middleware needs a Tenant function that names the authenticated caller, "+
			"or GlobalScope for one scope shared by all callers", ErrInvalid)
	case c.Tenant != nil && c.GlobalScope:
		return c, fmt.Errorf("%w: invalid config: Tenant and GlobalScope are exclusive", ErrInvalid)
	case c.MaxRequestBody < 0 || c.MaxResponseBody < 0:
		return c, fmt.Errorf("%w: invalid config: negative MaxRequestBody or MaxResponseBody", ErrInvalid)
	}
	if c.Methods == nil {
		c.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if c.Fingerprint == nil {
		c.Fingerprint = func(r *http.Request, body []byte) Fingerprint {
			return NewFingerprint([]byte(r.Method), []byte(r.URL.RequestURI()), body)
		}
	}
	if c.MaxRequestBody == 0 {
		c.MaxRequestBody = 1 << 20
	}
	if c.MaxResponseBody == 0 {
		c.MaxResponseBody = 1 << 20
	}
	if c.ReplayHeaders == nil {
		c.ReplayHeaders = []string{"Content-Location", "Location", "ETag", "Last-Modified"}
	}
	headers := slices.Clone(bodyHeaders)
	for _, h := range c.ReplayHeaders {
		name := http.CanonicalHeaderKey(h)
		if !validHeaderName(name) || slices.Contains(unreplayable, name) {
			return c, fmt.Errorf("%w: invalid config: ReplayHeaders may not list %s", ErrInvalid, short.Quote(h))
		}
		if !slices.Contains(headers, name) {
			headers = append(headers, name)
		}
	}
	c.ReplayHeaders = headers
	if c.Stored == nil {
		c.Stored = DefaultStored
	}
	return c, nil
}

// DefaultStored is the default of MiddlewareConfig.Stored: it stores the
// answers for which the handler ran to completion — 2xx, 3xx and 4xx — but
// not those that say the request was not processed and may succeed as it is
// once something outside it changed: 401 and 403 (credentials or rights
// change), 408 (timeout), 409 (a conflict that clears), 425 (too early) and
// 429 (rate limit), nor any 5xx. A Stored hook can narrow or extend it,
// e.g. to let a retry run again after a 404 that a later request may cure:
//
//	Stored: func(s int) bool { return s != http.StatusNotFound && idempotency.DefaultStored(s) },
func DefaultStored(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout, http.StatusConflict,
		http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status >= 200 && status < 500
}

// validHeaderName reports whether name is an HTTP token (RFC 9110).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// Middleware makes the handler idempotent per Idempotency-Key, with exec
// deciding whether it runs: a *Postgres (transactional mode; the handler
// finds its transaction with TxFrom and its response is sent only after the
// commit), a *Leased (AttemptFrom), a *Memory or a *Fenced. It returns an
// error matching ErrInvalid for a nil exec or a bad cfg, in particular one
// that sets neither Tenant nor GlobalScope.
//
// Authentication runs before the middleware: a key is scoped by the caller
// that cfg.Tenant names, so that a caller can neither replay, nor block, nor
// probe another caller's keys. A retry with the same key and payload in the
// same scope gets the stored response — its status, the headers that
// describe its body, the ReplayHeaders and the body, as the first answer
// had them — with "Idempotent-Replayed: true", and the handler does not run.
// Informational answers (1xx) pass through and are not stored.
// Errors are answered with application/problem+json bodies, following the
// IETF draft: a missing key 400, a malformed or oversized key (over
// MaxKeyLen bytes) or an unnamed caller 400, a request in flight 409 with
// Retry-After, a key reused with another payload 422; an expired key also
// 422, with its own problem type.
func Middleware(exec Executor, cfg MiddlewareConfig) (func(http.Handler) http.Handler, error) {
	if exec == nil {
		return nil, fmt.Errorf("%w: invalid config: nil Executor", ErrInvalid)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return &middleware{exec: exec, cfg: c, next: next}
	}, nil
}

type middleware struct {
	exec Executor
	cfg  MiddlewareConfig
	next http.Handler
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !slices.Contains(m.cfg.Methods, r.Method) {
		m.next.ServeHTTP(w, r)
		return
	}
	values := r.Header.Values(HeaderKey)
	if len(values) == 0 {
		if m.cfg.Optional {
			m.next.ServeHTTP(w, r)
			return
		}
		problem(w, http.StatusBadRequest, ProblemMissingKey, "Idempotency-Key missing",
			"This request requires an Idempotency-Key header.", 0)
		return
	}
	key, ok := m.key(w, r, values)
	if !ok {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, m.cfg.MaxRequestBody+1))
	if err != nil {
		problem(w, http.StatusBadRequest, ProblemInvalidKey, "Unreadable request body",
			"The request body could not be read.", 0)
		return
	}
	if int64(len(body)) > m.cfg.MaxRequestBody {
		problem(w, http.StatusRequestEntityTooLarge, ProblemTooLarge, "Request body too large",
			fmt.Sprintf("An idempotent request body may have at most %d bytes.", m.cfg.MaxRequestBody), 0)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	fp := m.cfg.Fingerprint(r, body)

	var first http.Header // every header of a first execution's response
	res, err := m.exec.Do(r.Context(), key, fp, func(ctx context.Context) (Result, error) {
		res, header, err := m.run(ctx, w, r, body)
		first = header
		return res, err
	})
	var unstored *unstoredError
	if errors.As(err, &unstored) {
		res, err = unstored.res, nil
	}
	if err != nil {
		m.fail(w, r, err)
		return
	}
	m.write(w, r, res, first)
}

// key returns the request's key in its caller's scope, or answers 400.
func (m *middleware) key(w http.ResponseWriter, r *http.Request, values []string) (Key, bool) {
	id, err := ParseKeyHeader(values)
	if err != nil {
		problem(w, http.StatusBadRequest, ProblemInvalidKey, "Invalid Idempotency-Key", err.Error(), 0)
		return Key{}, false
	}
	key := Key{ID: id}
	if m.cfg.Tenant != nil {
		tenant, err := m.cfg.Tenant(r)
		if err == nil {
			err = Key{Tenant: tenant, ID: "-"}.Validate()
		}
		if err == nil && tenant == "" {
			// An unnamed caller must not share the global scope.
			err = fmt.Errorf("%w: the Tenant function named no caller", ErrInvalid)
		}
		if err != nil {
			if m.cfg.OnError != nil {
				m.cfg.OnError(r, fmt.Errorf("idempotency: scope of the request: %w", err))
			}
			problem(w, http.StatusBadRequest, ProblemInvalidKey, "Invalid Idempotency-Key",
				"The caller that the Idempotency-Key belongs to could not be identified.", 0)
			return Key{}, false
		}
		key.Tenant = tenant
	}
	if err := key.Validate(); err != nil {
		problem(w, http.StatusBadRequest, ProblemInvalidKey, "Invalid Idempotency-Key", err.Error(), 0)
		return Key{}, false
	}
	return key, true
}

// run runs the handler for a first execution and returns what to store,
// with every header of its response.
func (m *middleware) run(ctx context.Context, w http.ResponseWriter, r *http.Request, body []byte) (Result, http.Header, error) {
	rec := &recorder{w: w, header: http.Header{}, limit: m.cfg.MaxResponseBody}
	r.Body = io.NopCloser(bytes.NewReader(body))
	m.next.ServeHTTP(rec, r.WithContext(ctx))
	if rec.overflow {
		return Result{}, nil, errResponseTooLarge
	}
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	if !finalStatus(status) {
		// net/http would panic on some of these, and a stored one would
		// fail every replay.
		return Result{}, nil, fmt.Errorf("idempotency: the handler answered with status %d, not a final HTTP status (200 to 599)", status)
	}
	res := Result{Status: status, Body: rec.body.Bytes(), Header: m.replayed(rec.header)}
	if !m.cfg.Stored(status) {
		return Result{}, rec.header, &unstoredError{res}
	}
	return res, rec.header, nil
}

// replayed returns the headers of h that are stored and replayed. A header
// present without a value is kept: an empty Content-Type is how a handler
// stops net/http from sniffing one, and the replay must do the same.
func (m *middleware) replayed(h http.Header) http.Header {
	out := http.Header{}
	for _, name := range m.cfg.ReplayHeaders {
		if v, ok := h[name]; ok {
			out[name] = slices.Clone(v)
		}
	}
	return out
}

// fail answers an execution that produced no response to send.
func (m *middleware) fail(w http.ResponseWriter, r *http.Request, err error) {
	var inFlight *InFlightError
	switch {
	case errors.As(err, &inFlight):
		problem(w, http.StatusConflict, ProblemInFlight, "Request in flight",
			"A request with this Idempotency-Key is being processed; retry later.", inFlight.RetryAfter)
	case errors.Is(err, ErrSuperseded), errors.Is(err, fencedlock.ErrFenced):
		problem(w, http.StatusConflict, ProblemInFlight, "Request in flight",
			"A newer execution of this Idempotency-Key took over; retry to get its response.", time.Second)
	case errors.Is(err, ErrKeyReused):
		problem(w, http.StatusUnprocessableEntity, ProblemKeyReused, "Idempotency-Key reused",
			"This Idempotency-Key was used with a different request payload.", 0)
	case errors.Is(err, ErrExpired):
		problem(w, http.StatusUnprocessableEntity, ProblemExpired, "Idempotency-Key expired",
			"This Idempotency-Key has expired and cannot be used again.", 0)
	case errors.Is(err, ErrInvalid):
		problem(w, http.StatusBadRequest, ProblemInvalidKey, "Invalid Idempotency-Key", err.Error(), 0)
	default:
		m.internal(w, r, err)
	}
}

func (m *middleware) internal(w http.ResponseWriter, r *http.Request, err error) {
	if m.cfg.OnError != nil {
		m.cfg.OnError(r, err)
	}
	problem(w, http.StatusInternalServerError, ProblemInternal, "Internal error",
		"The request could not be completed; retry with the same Idempotency-Key.", 0)
}

// write sends res: with every header of the handler's response on a first
// execution (first), with the stored ones on a replay. A stored header
// outside ReplayHeaders (stored under another configuration) is not
// replayed, and Set-Cookie never is.
func (m *middleware) write(w http.ResponseWriter, r *http.Request, res Result, first http.Header) {
	if !finalStatus(res.Status) {
		m.internal(w, r, fmt.Errorf("idempotency: stored status %d is not a final HTTP status (200 to 599)", res.Status))
		return
	}
	h := w.Header()
	if res.Replayed || first == nil {
		for k, v := range m.replayed(res.Header) {
			h[k] = v
		}
	} else {
		for k, v := range first {
			h[k] = v
		}
	}
	if res.Replayed {
		h.Set(HeaderReplayed, "true")
	}
	h.Set("Content-Length", strconv.Itoa(len(res.Body)))
	w.WriteHeader(res.Status)
	_, _ = w.Write(res.Body) // the client went away: nothing to do
}

var errResponseTooLarge = errors.New("idempotency: response body larger than MaxResponseBody")

type unstoredError struct{ res Result }

func (e *unstoredError) Error() string {
	return fmt.Sprintf("idempotency: response with status %d not stored", e.res.Status)
}

// finalStatus reports whether status is a final HTTP status the middleware
// stores and replays.
func finalStatus(status int) bool { return status >= 200 && status <= 599 }

// recorder buffers a handler's response, and passes informational answers
// (1xx) through to w as they come.
type recorder struct {
	w        http.ResponseWriter
	header   http.Header
	status   int
	body     bytes.Buffer
	limit    int
	overflow bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status != 0 {
		return
	}
	if status >= 100 && status <= 199 && status != http.StatusSwitchingProtocols {
		r.inform(status)
		return
	}
	r.status = status
}

// inform sends an informational answer with the handler's headers so far,
// as net/http does, and leaves w's own headers as they were.
func (r *recorder) inform(status int) {
	h := r.w.Header()
	saved := map[string][]string{}
	for k, v := range r.header {
		if old, ok := h[k]; ok {
			saved[k] = old
		}
		h[k] = v
	}
	r.w.WriteHeader(status)
	for k := range r.header {
		if old, ok := saved[k]; ok {
			h[k] = old
		} else {
			delete(h, k)
		}
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len()+len(p) > r.limit {
		r.overflow = true
		return 0, errResponseTooLarge
	}
	return r.body.Write(p)
}

// ParseKeyHeader returns the key carried by the Idempotency-Key header
// values: a structured-field string ("…", with \" and \\ escapes, optional
// parameters after it ignored) or a raw token of visible ASCII. It returns
// an error matching ErrInvalid for several values, an empty key, a key
// longer than MaxKeyLen bytes, or a malformed one.
func ParseKeyHeader(values []string) (string, error) {
	if len(values) != 1 {
		return "", fmt.Errorf("%w: %d Idempotency-Key headers, want one", ErrInvalid, len(values))
	}
	v := strings.Trim(values[0], " \t")
	var key string
	if strings.HasPrefix(v, `"`) {
		var b strings.Builder
		closed := false
		i := 1
		for ; i < len(v); i++ {
			ch := v[i]
			if ch == '\\' {
				i++
				if i == len(v) || (v[i] != '"' && v[i] != '\\') {
					return "", fmt.Errorf("%w: bad escape in Idempotency-Key", ErrInvalid)
				}
				b.WriteByte(v[i])
				continue
			}
			if ch == '"' {
				closed = true
				break
			}
			if ch < 0x20 || ch > 0x7e {
				return "", fmt.Errorf("%w: Idempotency-Key has a non-printable character", ErrInvalid)
			}
			b.WriteByte(ch)
		}
		if rest := v[min(i+1, len(v)):]; !closed || (rest != "" && !strings.HasPrefix(rest, ";")) {
			return "", fmt.Errorf("%w: malformed quoted Idempotency-Key", ErrInvalid)
		}
		key = b.String()
	} else {
		for i := 0; i < len(v); i++ {
			if v[i] <= 0x20 || v[i] > 0x7e || v[i] == '"' {
				return "", fmt.Errorf("%w: Idempotency-Key has a character outside visible ASCII", ErrInvalid)
			}
		}
		key = v
	}
	switch {
	case key == "":
		return "", fmt.Errorf("%w: empty Idempotency-Key", ErrInvalid)
	case len(key) > MaxKeyLen:
		return "", fmt.Errorf("%w: Idempotency-Key is %d bytes, longer than %d", ErrInvalid, len(key), MaxKeyLen)
	}
	return key, nil
}

func problem(w http.ResponseWriter, status int, typ, title, detail string, retryAfter time.Duration) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct { // a write error means the client went away
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{typ, title, status, detail})
}
