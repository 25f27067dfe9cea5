package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/lockfree-go/lockfree/internal/failpoint"
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

// MiddlewareConfig configures a Middleware. Exactly one of Tenant and
// GlobalScope must be set: a Middleware cannot be built without saying whose
// keys a request's key is among, so a nil *MiddlewareConfig is refused.
type MiddlewareConfig struct {
	// Tenant names the caller that the request's key belongs to: the
	// principal (account, tenant, API client) established by the
	// authentication, which must run before the middleware. A key is
	// visible only to requests with the same name: another caller sending
	// the same key gets no replay, no 409 and no 422 from it, and runs the
	// handler. The name must be 1 to MaxKeyLen bytes of UTF-8 without NUL
	// (hash a longer principal); an error or an empty name gives 400.
	// Required unless GlobalScope is set.
	Tenant func(r *http.Request) (string, error)
	// GlobalScope puts every request's key in one scope shared by all
	// callers, instead of Tenant: any caller who sends a key that another
	// used with the same payload gets that caller's stored response. Set it
	// only when every caller may see every other caller's responses (one
	// client, or a service behind an internal gateway). Defaults to false.
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
	// fingerprint), in bytes; a larger one gives 413 and the handler does
	// not run. math.MaxInt64 means no limit; zero means the default; a
	// negative value is refused (ErrInvalid). Defaults to 1 MiB.
	MaxRequestBody int64
	// MaxResponseBody is the largest response body stored, in bytes.
	// math.MaxInt means no limit; zero means the default; a negative value
	// is refused (ErrInvalid). A handler that writes more has done its
	// work, but its response cannot be replayed: the client gets a 500
	// ProblemResponseLost, which is stored in its place, so the key is
	// spent and a retry gets that answer again — except on a *Postgres,
	// whose transaction rolls the handler's writes back, so that the key
	// stays free and a retry runs again. Defaults to 1 MiB.
	MaxResponseBody int
	// ReplayHeaders are the response headers stored and replayed to every
	// retry of the key, besides those that describe the body, which always
	// are: Content-Type, Content-Encoding, Content-Language,
	// Content-Disposition and Vary. Every listed header is replayed to
	// whoever retries the key in its scope: never list one that carries a
	// secret or a session. Set-Cookie is never replayed (listing it is an
	// error), nor are the headers of the connection and the framing.
	// Defaults to Content-Location, Location, ETag and Last-Modified.
	ReplayHeaders []string
	// Stored says whether a response with this final status (200 to 599)
	// is stored and replayed: the replay policy (docs/idempotency.md,
	// "Replay policy"). An unstored response is sent as it is, and the key
	// is released so that a retry runs again: a status it refuses says that
	// the handler did nothing a retry would repeat (or undid it), which the
	// middleware cannot check. Defaults to DefaultStored; AllStored stores
	// every answer.
	Stored func(status int) bool
	// OnError, when set, is told of errors answered with 500, of a first
	// execution whose response was lost (ProblemResponseLost), and of the
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

func (c *MiddlewareConfig) withDefaults() MiddlewareConfig {
	var d MiddlewareConfig
	if c != nil {
		d = *c
	}
	if d.Methods == nil {
		d.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if d.Fingerprint == nil {
		d.Fingerprint = func(r *http.Request, body []byte) Fingerprint {
			return NewFingerprint([]byte(r.Method), []byte(r.URL.RequestURI()), body)
		}
	}
	if d.MaxRequestBody == 0 {
		d.MaxRequestBody = 1 << 20
	}
	if d.MaxResponseBody == 0 {
		d.MaxResponseBody = 1 << 20
	}
	if d.ReplayHeaders == nil {
		d.ReplayHeaders = []string{"Content-Location", "Location", "ETag", "Last-Modified"}
	}
	if d.Stored == nil {
		d.Stored = DefaultStored
	}
	return d
}

func (c MiddlewareConfig) validate() error {
	switch {
	case c.Tenant == nil && !c.GlobalScope:
		return fmt.Errorf("%w: a Middleware needs a Tenant function that names the authenticated caller, "+
			"or GlobalScope for one scope shared by all callers", ErrInvalid)
	case c.Tenant != nil && c.GlobalScope:
		return fmt.Errorf("%w: Tenant and GlobalScope are exclusive", ErrInvalid)
	case c.MaxRequestBody < 0 || c.MaxResponseBody < 0:
		return fmt.Errorf("%w: negative MaxRequestBody or MaxResponseBody", ErrInvalid)
	}
	for _, h := range c.ReplayHeaders {
		if name := http.CanonicalHeaderKey(h); !validHeaderName(name) || slices.Contains(unreplayable, name) {
			return fmt.Errorf("%w: ReplayHeaders may not list %s", ErrInvalid, short.Quote(h))
		}
	}
	return nil
}

// replayHeaders are the headers a Middleware stores: those that describe
// the body, then the configured ones, each once and canonical.
func (c MiddlewareConfig) replayHeaders() []string {
	headers := slices.Clone(bodyHeaders)
	for _, h := range c.ReplayHeaders {
		if name := http.CanonicalHeaderKey(h); !slices.Contains(headers, name) {
			headers = append(headers, name)
		}
	}
	return headers
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

// AllStored is the Stored hook that stores every final answer (200 to 599),
// server errors included: a retry gets the first answer, whatever it was —
// the IETF draft's "the result of the previously completed operation,
// success or an error" read literally. Use it when a handler can answer
// 5xx after an effect that no transaction undoes (a Memory, Leased or
// Fenced executor), so that the retry replays the error rather than do the
// effect again; the cost is that a transient failure is final for its key.
//
//	Stored: idempotency.AllStored,
func AllStored(status int) bool { return finalStatus(status) }

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

// Middleware makes a handler idempotent per Idempotency-Key, with an
// Executor deciding whether it runs: a *Postgres (transactional mode; the
// handler finds its transaction with TxFrom, and its response is sent only
// after the commit), a *Leased (AttemptFrom), a *Memory or a *Fenced. It is
// an http.Handler, safe for concurrent use; the zero value is not usable:
// call NewMiddleware.
//
// Authentication runs before the middleware: a key is scoped by the caller
// that MiddlewareConfig.Tenant names, so that a caller can neither replay,
// nor block, nor probe another caller's keys. A retry with the same key and
// payload in the same scope gets the stored response — its status, the
// headers that describe its body, the ReplayHeaders and the body, as the
// first answer had them — with "Idempotent-Replayed: true", and the handler
// does not run. Informational answers (1xx) pass through and are not stored.
// Errors are answered with application/problem+json bodies, following the
// IETF draft: a missing key 400, a malformed or oversized key (over
// MaxKeyLen bytes) or an unnamed caller 400, a request in flight 409 with
// Retry-After, a key reused with another payload 422; an expired key also
// 422, with its own problem type.
//
// A handler that ran to the end leaves its key spent. When its response
// cannot be stored (a body over MaxResponseBody, a status outside 200 to
// 599), a 500 ProblemResponseLost is stored in its place and every retry
// gets it, so that the work is not done twice. A *Postgres is the
// exception: its transaction rolls the handler's writes back, so the key
// stays free and the 500 (ProblemInternal) invites the retry. A handler
// that panics, or answers a status that Stored refuses, has not finished:
// its key is released and a retry runs it again.
type Middleware struct {
	exec    Executor
	next    http.Handler
	cfg     MiddlewareConfig
	headers []string // what is stored and replayed
	// rollsBack is true when a failed Do undoes the handler's writes (a
	// *Postgres: they are in its transaction), so that a finished
	// handler whose response is lost may run again.
	rollsBack bool
}

// NewMiddleware returns next made idempotent by exec. A nil exec or next, or
// a bad cfg — in particular a nil one, or one that sets neither Tenant nor
// GlobalScope — give an error matching ErrInvalid.
func NewMiddleware(exec Executor, next http.Handler, cfg *MiddlewareConfig) (*Middleware, error) {
	if exec == nil || next == nil {
		return nil, fmt.Errorf("%w: nil Executor or handler", ErrInvalid)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	_, rollsBack := exec.(*Postgres)
	return &Middleware{exec: exec, next: next, cfg: c, headers: c.replayHeaders(), rollsBack: rollsBack}, nil
}

// ServeHTTP implements http.Handler.
func (m *Middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !slices.Contains(m.cfg.Methods, r.Method) {
		m.next.ServeHTTP(w, r)
		return
	}
	req, err := m.read(r)
	if errors.Is(err, errMissingKey) && m.cfg.Optional {
		m.next.ServeHTTP(w, r)
		return
	}
	if err != nil {
		m.fail(w, r, err)
		return
	}
	var first http.Header // every header of a first execution's response
	var lost *lostError   // a first execution's response that is lost
	res, err := m.exec.Do(r.Context(), req.key, req.fp, func(ctx context.Context) (Result, error) {
		res, header, err := m.run(ctx, w, r, req.body)
		if l, ok := errors.AsType[*lostError](err); ok && !m.rollsBack &&
			!failpoint.Mutant("idempotency.middleware.lost-response") {
			// The handler's work is done and stays done: spend the key
			// with a marker, so that no retry runs it again.
			lost = l
			return l.marker(), nil
		}
		first = header
		return res, err
	})
	if lost != nil && m.cfg.OnError != nil {
		m.cfg.OnError(r, lost)
	}
	if unstored, ok := errors.AsType[*unstoredError](err); ok {
		res, err = unstored.res, nil
	}
	if unrecorded, ok := errors.AsType[*UnrecordedError](err); ok {
		// The handler's work was done: its response is the answer.
		res, err = unrecorded.Result, nil
	}
	if err != nil {
		m.fail(w, r, err)
		return
	}
	m.write(w, r, res, first)
}

// request is what the middleware reads of an idempotent request.
type request struct {
	key  Key
	body []byte
	fp   Fingerprint
}

// read reads r's key, in its caller's scope, and its body (which it leaves
// readable again), or returns why it cannot run: errMissingKey, a
// *scopeError, an error matching ErrInvalid, errUnreadableBody or a
// *tooLargeError.
func (m *Middleware) read(r *http.Request) (request, error) {
	values := r.Header.Values(HeaderKey)
	if len(values) == 0 {
		return request{}, errMissingKey
	}
	id, err := ParseKeyHeader(values)
	if err != nil {
		return request{}, err
	}
	key := Key{ID: id}
	if m.cfg.Tenant != nil {
		if key.Tenant, err = m.tenant(r); err != nil {
			return request{}, &scopeError{err}
		}
	}
	if err := key.Validate(); err != nil {
		return request{}, err
	}
	body, over, err := readAtMost(r.Body, m.cfg.MaxRequestBody)
	switch {
	case err != nil:
		return request{}, errUnreadableBody
	case over:
		return request{}, &tooLargeError{m.cfg.MaxRequestBody}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return request{key: key, body: body, fp: m.cfg.Fingerprint(r, body)}, nil
}

// tenant names the caller of r: a valid, non-empty tenant.
func (m *Middleware) tenant(r *http.Request) (string, error) {
	tenant, err := m.cfg.Tenant(r)
	if err == nil {
		err = Key{Tenant: tenant, ID: "-"}.Validate()
	}
	if err == nil && tenant == "" {
		// An unnamed caller must not share the global scope.
		err = fmt.Errorf("%w: the Tenant function named no caller", ErrInvalid)
	}
	return tenant, err
}

// readAtMost reads r whole if it holds at most limit bytes (limit ≥ 0),
// and reports over when it holds more. A limit of math.MaxInt64 reads r
// whole: no reader holds more.
func readAtMost(r io.Reader, limit int64) (body []byte, over bool, err error) {
	n := limit
	if n < math.MaxInt64 {
		n++ // one byte more than the limit tells a longer body
	}
	body, err = io.ReadAll(io.LimitReader(r, n))
	return body, int64(len(body)) > limit, err
}

// run runs the handler for a first execution and returns what to store,
// with every header of its response. A handler that ran to the end with a
// response that cannot be stored gives a *lostError, unless its status
// says that it did nothing (Stored refuses it): then the response, which
// cannot be sent whole, gives errResponseTooLarge and the key is released.
func (m *Middleware) run(ctx context.Context, w http.ResponseWriter, r *http.Request, body []byte) (Result, http.Header, error) {
	rec := &recorder{w: w, header: http.Header{}, limit: m.cfg.MaxResponseBody}
	r.Body = io.NopCloser(bytes.NewReader(body))
	m.next.ServeHTTP(rec, r.WithContext(ctx))
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	switch {
	case !finalStatus(status):
		// net/http would panic on some of these, and a stored one would
		// fail every replay.
		return Result{}, nil, &lostError{status, "its status is not a final HTTP status (200 to 599)"}
	case rec.overflow && !m.cfg.Stored(status):
		return Result{}, nil, errResponseTooLarge
	case rec.overflow:
		return Result{}, nil, &lostError{status, fmt.Sprintf("its body is larger than %d bytes", m.cfg.MaxResponseBody)}
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
func (m *Middleware) replayed(h http.Header) http.Header {
	out := http.Header{}
	for _, name := range m.headers {
		if v, ok := h[name]; ok {
			out[name] = slices.Clone(v)
		}
	}
	return out
}

var errResponseTooLarge = errors.New("idempotency: response body larger than MaxResponseBody")

// unstoredError carries a first execution's response that is sent but not
// stored (MiddlewareConfig.Stored): as an error, it makes the executor
// release the key.
type unstoredError struct{ res Result }

func (e *unstoredError) Error() string {
	return fmt.Sprintf("idempotency: response with status %d not stored", e.res.Status)
}

// finalStatus reports whether status is a final HTTP status the middleware
// stores and replays.
func finalStatus(status int) bool { return status >= 200 && status <= 599 }
