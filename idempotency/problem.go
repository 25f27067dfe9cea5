package idempotency

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
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
	// ProblemResponseLost is the answer, with status 500, to a request
	// whose handler ran to the end but whose response the middleware
	// cannot store: a body over MaxResponseBody, or a status outside 200 to
	// 599. The key is spent: the answer is stored in place of the response,
	// and every retry with the key gets it again (Idempotent-Replayed:
	// true) instead of running the handler a second time.
	ProblemResponseLost = "https://pkg.go.dev/github.com/lockfree-go/lockfree/idempotency#ProblemResponseLost"
)

// Why a request cannot run, besides the executors' errors.
var (
	errMissingKey     = errors.New("idempotency: Idempotency-Key missing")
	errUnreadableBody = errors.New("idempotency: unreadable request body")
	// errNoCaller is what a *scopeError is.
	errNoCaller = errors.New("idempotency: the caller could not be identified")
)

// scopeError is a failure of the Tenant function, or a name it gave that
// cannot scope a key.
type scopeError struct{ err error }

func (e *scopeError) Error() string        { return "idempotency: scope of the request: " + e.err.Error() }
func (e *scopeError) Unwrap() error        { return e.err }
func (e *scopeError) Is(target error) bool { return target == errNoCaller }

// tooLargeError is a request body over MaxRequestBody.
type tooLargeError struct{ limit int64 }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("idempotency: request body over %d bytes", e.limit)
}

// problems is how Middleware answers an error, first match first: the
// errors of reading the request, then those of Executor.Do. Anything else is
// a 500 (ProblemInternal), told to OnError.
var problems = []struct {
	is         error
	status     int
	typ, title string
	// detail is the problem's detail; empty means the error's own text.
	detail string
	// report tells OnError of the error, which the answer does not show.
	report bool
	// retryAfter is the Retry-After hint, unless the error is an
	// *InFlightError, which has its own.
	retryAfter time.Duration
}{
	{is: errMissingKey, status: http.StatusBadRequest, typ: ProblemMissingKey, title: "Idempotency-Key missing",
		detail: "This request requires an Idempotency-Key header."},
	{is: errNoCaller, status: http.StatusBadRequest, typ: ProblemInvalidKey, title: "Invalid Idempotency-Key",
		detail: "The caller that the Idempotency-Key belongs to could not be identified.", report: true},
	{is: errUnreadableBody, status: http.StatusBadRequest, typ: ProblemInvalidKey, title: "Unreadable request body",
		detail: "The request body could not be read."},
	{is: ErrInFlight, status: http.StatusConflict, typ: ProblemInFlight, title: "Request in flight",
		detail: "A request with this Idempotency-Key is being processed; retry later."},
	{is: ErrSuperseded, status: http.StatusConflict, typ: ProblemInFlight, title: "Request in flight",
		detail: "A newer execution of this Idempotency-Key took over; retry to get its response.", retryAfter: time.Second},
	{is: fencedlock.ErrFenced, status: http.StatusConflict, typ: ProblemInFlight, title: "Request in flight",
		detail: "A newer execution of this Idempotency-Key took over; retry to get its response.", retryAfter: time.Second},
	{is: ErrKeyReused, status: http.StatusUnprocessableEntity, typ: ProblemKeyReused, title: "Idempotency-Key reused",
		detail: "This Idempotency-Key was used with a different request payload."},
	{is: ErrExpired, status: http.StatusUnprocessableEntity, typ: ProblemExpired, title: "Idempotency-Key expired",
		detail: "This Idempotency-Key has expired and cannot be used again."},
	{is: ErrInvalid, status: http.StatusBadRequest, typ: ProblemInvalidKey, title: "Invalid Idempotency-Key"},
}

// fail answers a request that produced no response to send.
func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, err error) {
	if tl, ok := errors.AsType[*tooLargeError](err); ok {
		problem(w, http.StatusRequestEntityTooLarge, ProblemTooLarge, "Request body too large",
			fmt.Sprintf("An idempotent request body may have at most %d bytes.", tl.limit), 0)
		return
	}
	for _, p := range problems {
		if !errors.Is(err, p.is) {
			continue
		}
		detail, retryAfter := p.detail, p.retryAfter
		if detail == "" {
			detail = err.Error()
		}
		if inFlight, ok := errors.AsType[*InFlightError](err); ok {
			retryAfter = inFlight.RetryAfter
		}
		if p.report && m.cfg.OnError != nil {
			m.cfg.OnError(r, err)
		}
		problem(w, p.status, p.typ, p.title, detail, retryAfter)
		return
	}
	m.internal(w, r, err)
}

func (m *Middleware) internal(w http.ResponseWriter, r *http.Request, err error) {
	if m.cfg.OnError != nil {
		m.cfg.OnError(r, err)
	}
	problem(w, http.StatusInternalServerError, ProblemInternal, "Internal error",
		"The request could not be completed; retry with the same Idempotency-Key.", 0)
}

// write sends res: with every header of the handler's response on a first
// execution (first), with the stored ones on a replay. A stored header
// outside the replayed ones (stored under another configuration) is not
// replayed, and Set-Cookie never is.
func (m *Middleware) write(w http.ResponseWriter, r *http.Request, res Result, first http.Header) {
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

// problem writes an application/problem+json answer (RFC 9457).
func problem(w http.ResponseWriter, status int, typ, title, detail string, retryAfter time.Duration) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	w.Header().Set("Content-Type", problemContentType)
	w.WriteHeader(status)
	_, _ = w.Write(problemBody(status, typ, title, detail)) // a write error means the client went away
}

const problemContentType = "application/problem+json"

// problemBody is the body of a problem answer.
func problemBody(status int, typ, title, detail string) []byte {
	b, _ := json.Marshal(struct { // strings and an int: it cannot fail
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{typ, title, status, detail})
	return append(b, '\n')
}

// lostError is a first execution whose handler ran to the end but whose
// response cannot be stored; Middleware stores marker in its place.
type lostError struct {
	status int    // the handler's
	why    string // what makes the response unstorable
}

func (e *lostError) Error() string {
	return fmt.Sprintf("idempotency: the handler answered %d, but its response cannot be stored: %s", e.status, e.why)
}

// marker is the answer stored in place of the lost response: a problem
// that says the request was processed and the key is spent.
func (e *lostError) marker() Result {
	detail := fmt.Sprintf("The request was processed (the handler answered %d), but its response could not be kept: %s. "+
		"This Idempotency-Key is spent: a retry with it gets this answer again. "+
		"A request with a new key would be processed again.", e.status, e.why)
	return Result{Status: http.StatusInternalServerError, Header: http.Header{"Content-Type": {problemContentType}},
		Body: problemBody(http.StatusInternalServerError, ProblemResponseLost, "Response lost", detail)}
}
