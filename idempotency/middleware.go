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

// MiddlewareConfig configures Middleware. The zero value is valid.
type MiddlewareConfig struct {
	// Methods are the methods that require an Idempotency-Key; requests with
	// other methods pass through untouched. Defaults to POST and PATCH (the
	// methods that are not idempotent by definition).
	Methods []string
	// Optional lets requests of Methods without a key pass through
	// unprotected instead of being refused with 400. Defaults to false.
	Optional bool
	// Tenant returns the scope of the request's key (the authenticated
	// account, say); an error gives 400. Defaults to one scope for all.
	Tenant func(r *http.Request) (string, error)
	// Fingerprint identifies the request's payload; a key reused with a
	// different fingerprint gives 422. Defaults to the method, the path and
	// query, and the body.
	Fingerprint func(r *http.Request, body []byte) Fingerprint
	// MaxRequestBody is the largest request body read (for the
	// fingerprint); a larger one gives 413. Defaults to 1 MiB.
	MaxRequestBody int64
	// MaxResponseBody is the largest response body stored; a handler that
	// writes more gets a 500 answer and nothing is stored. Defaults to 1 MiB.
	MaxResponseBody int
	// ReplayHeaders are the response headers stored and replayed. Defaults
	// to Content-Type, Content-Location, Location, ETag and Last-Modified.
	ReplayHeaders []string
	// Stored says whether a response with this status is stored (and
	// replayed). An unstored response is sent as it is, and the key is
	// released so that a retry runs again. Defaults to status < 500.
	Stored func(status int) bool
	// OnError, when set, is told of errors answered with 500. Defaults to
	// none.
	OnError func(r *http.Request, err error)
}

func (c MiddlewareConfig) withDefaults() MiddlewareConfig {
	if c.Methods == nil {
		c.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if c.Tenant == nil {
		c.Tenant = func(*http.Request) (string, error) { return "", nil }
	}
	if c.Fingerprint == nil {
		c.Fingerprint = func(r *http.Request, body []byte) Fingerprint {
			return NewFingerprint([]byte(r.Method), []byte(r.URL.RequestURI()), body)
		}
	}
	if c.MaxRequestBody <= 0 {
		c.MaxRequestBody = 1 << 20
	}
	if c.MaxResponseBody <= 0 {
		c.MaxResponseBody = 1 << 20
	}
	if c.ReplayHeaders == nil {
		c.ReplayHeaders = []string{"Content-Type", "Content-Location", "Location", "ETag", "Last-Modified"}
	}
	if c.Stored == nil {
		c.Stored = func(status int) bool { return status < 500 }
	}
	return c
}

// Middleware makes the handler idempotent per Idempotency-Key, with exec
// deciding whether it runs: a *Postgres (transactional mode; the handler
// finds its transaction with TxFrom and its response is sent only after the
// commit), a *Leased (AttemptFrom), a *Memory or a *Fenced. A nil cfg means
// defaults.
//
// The handler's response is buffered; its status, the ReplayHeaders and the
// body are stored. A retry with the same key and payload gets the stored
// response with "Idempotent-Replayed: true". Errors are answered with
// application/problem+json bodies, following the IETF draft: a missing key
// 400, a malformed or oversized key (over MaxKeyLen bytes) 400, a request in
// flight 409 with Retry-After, a key reused with another payload 422; an
// expired key also 422, with its own problem type.
func Middleware(exec Executor, cfg *MiddlewareConfig) func(http.Handler) http.Handler {
	var c MiddlewareConfig
	if cfg != nil {
		c = *cfg
	}
	c = c.withDefaults()
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !slices.Contains(c.Methods, r.Method) {
				next.ServeHTTP(w, r)
				return
			}
			values := r.Header.Values(HeaderKey)
			if len(values) == 0 {
				if c.Optional {
					next.ServeHTTP(w, r)
					return
				}
				problem(w, http.StatusBadRequest, ProblemMissingKey, "Idempotency-Key missing",
					"This request requires an Idempotency-Key header.", 0)
				return
			}
			id, err := ParseKeyHeader(values)
			if err != nil {
				problem(w, http.StatusBadRequest, ProblemInvalidKey, "Invalid Idempotency-Key", err.Error(), 0)
				return
			}
			tenant, err := c.Tenant(r)
			if err != nil {
				problem(w, http.StatusBadRequest, ProblemInvalidKey, "Invalid Idempotency-Key", err.Error(), 0)
				return
			}
			key := Key{Tenant: tenant, ID: id}
			if err := key.Validate(); err != nil {
				problem(w, http.StatusBadRequest, ProblemInvalidKey, "Invalid Idempotency-Key", err.Error(), 0)
				return
			}
			body, err := io.ReadAll(io.LimitReader(r.Body, c.MaxRequestBody+1))
			if err != nil {
				problem(w, http.StatusBadRequest, ProblemInvalidKey, "Unreadable request body", err.Error(), 0)
				return
			}
			if int64(len(body)) > c.MaxRequestBody {
				problem(w, http.StatusRequestEntityTooLarge, ProblemTooLarge, "Request body too large",
					fmt.Sprintf("An idempotent request body may have at most %d bytes.", c.MaxRequestBody), 0)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			fp := c.Fingerprint(r, body)

			var first http.Header // every header of a first execution's response
			res, err := exec.Do(r.Context(), key, fp, func(ctx context.Context) (Result, error) {
				rec := &recorder{header: http.Header{}, limit: c.MaxResponseBody}
				r.Body = io.NopCloser(bytes.NewReader(body))
				next.ServeHTTP(rec, r.WithContext(ctx))
				if rec.overflow {
					return Result{}, errResponseTooLarge
				}
				status := rec.status
				if status == 0 {
					status = http.StatusOK
				}
				first = rec.header
				res := Result{Status: status, Body: rec.body.Bytes(), Header: http.Header{}}
				for _, h := range c.ReplayHeaders {
					if v := rec.header.Values(h); len(v) > 0 {
						res.Header[http.CanonicalHeaderKey(h)] = slices.Clone(v)
					}
				}
				if !c.Stored(status) {
					return Result{}, &unstoredError{res}
				}
				return res, nil
			})
			var unstored *unstoredError
			var inFlight *InFlightError
			switch {
			case err == nil:
			case errors.As(err, &unstored):
				res, err = unstored.res, nil
			case errors.As(err, &inFlight):
				problem(w, http.StatusConflict, ProblemInFlight, "Request in flight",
					"A request with this Idempotency-Key is being processed; retry later.", inFlight.RetryAfter)
				return
			case errors.Is(err, ErrSuperseded), errors.Is(err, fencedlock.ErrFenced):
				problem(w, http.StatusConflict, ProblemInFlight, "Request in flight",
					"A newer execution of this Idempotency-Key took over; retry to get its response.", time.Second)
				return
			case errors.Is(err, ErrKeyReused):
				problem(w, http.StatusUnprocessableEntity, ProblemKeyReused, "Idempotency-Key reused",
					"This Idempotency-Key was used with a different request payload.", 0)
				return
			case errors.Is(err, ErrExpired):
				problem(w, http.StatusUnprocessableEntity, ProblemExpired, "Idempotency-Key expired",
					"This Idempotency-Key has expired and cannot be used again.", 0)
				return
			case errors.Is(err, ErrInvalid):
				problem(w, http.StatusBadRequest, ProblemInvalidKey, "Invalid Idempotency-Key", err.Error(), 0)
				return
			default:
				if c.OnError != nil {
					c.OnError(r, err)
				}
				problem(w, http.StatusInternalServerError, ProblemInternal, "Internal error",
					"The request could not be completed; retry with the same Idempotency-Key.", 0)
				return
			}
			if res.Replayed || first == nil {
				for k, v := range res.Header {
					w.Header()[k] = slices.Clone(v)
				}
			} else {
				for k, v := range first {
					w.Header()[k] = v
				}
			}
			if res.Replayed {
				w.Header().Set(HeaderReplayed, "true")
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(res.Body)))
			w.WriteHeader(res.Status)
			_, _ = w.Write(res.Body) // the client went away: nothing to do
		})
	}
}

var errResponseTooLarge = errors.New("idempotency: response body larger than MaxResponseBody")

type unstoredError struct{ res Result }

func (e *unstoredError) Error() string {
	return fmt.Sprintf("idempotency: response with status %d not stored", e.res.Status)
}

// recorder buffers a handler's response.
type recorder struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	limit    int
	overflow bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
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
