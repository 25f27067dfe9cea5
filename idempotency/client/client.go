// Package client is the client side of idempotency keys: an
// http.RoundTripper that keys each request of a non-idempotent method and
// resends it, with the same key, until the server gives an answer of its
// own.
//
// Guarantee: every attempt of one request carries the same
// Idempotency-Key (the IETF draft "The Idempotency-Key HTTP Header Field"):
// the caller's, or one the Transport mints for a request that has none. A
// request whose answer was lost — a reset connection, a timeout, a 5xx from
// a proxy — is sent again with that key, so that a server that honours it
// (idempotency.Middleware) runs it once and answers the retry with the
// first response. A request the Transport did not key (another method, no
// key) is sent once and never retried.
//
// When it retries: after a network error, and after a 408, 409 (the key is
// in flight), 425, 429 or any 5xx that is not a replay, waiting as
// Retry-After says (seconds or an HTTP date) or by a jittered exponential
// backoff, both capped by MaxDelay, for at most MaxAttempts attempts, and
// never past the request's context. It stops at any other answer: a 2xx,
// 3xx, a 4xx such as 422 (the key was used for another payload, or has
// expired), or a response with "Idempotent-Replayed: true", which is the
// server's stored outcome and will not change.
//
// What it does NOT protect: the key lives as long as one RoundTrip. A
// caller that gives up and sends the request again later (another
// http.Client.Do) gets a new key, and a second execution, unless it sets
// the key itself and keeps it with its intent. A server that ignores keys
// runs every attempt. The body must be sent again: a request needs GetBody
// (http.NewRequest sets it for bytes, strings and their readers), or a body
// of at most MaxBufferedBody bytes, which the Transport buffers; a larger
// one is refused before anything is sent (ErrBodyNotResendable).
//
//	tr, err := client.NewTransport(nil)
//	c := &http.Client{Transport: tr, Timeout: time.Minute} // Timeout bounds every attempt together
//	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// Header names, as the server side (package idempotency) uses them.
const (
	// HeaderKey carries the request's idempotency key.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is "true" on a response that replays the stored
	// outcome of an earlier attempt.
	HeaderReplayed = "Idempotent-Replayed"
)

var (
	// ErrInvalid reports a bad configuration or request, before anything
	// was sent.
	ErrInvalid = errors.New("idempotency/client: invalid argument")
	// ErrBodyNotResendable reports a request whose body could not be sent
	// again: no GetBody, and more than MaxBufferedBody bytes. Nothing was
	// sent.
	ErrBodyNotResendable = errors.New("idempotency/client: request body cannot be resent")
)

// Config configures a Transport. A nil *Config means the defaults; a
// Config is a value, safe to copy.
type Config struct {
	// Base sends each attempt. Defaults to http.DefaultTransport.
	Base http.RoundTripper
	// Methods are the methods whose requests the Transport keys (when they
	// carry no key) and retries. A request of another method is retried
	// only if the caller gave it a key. Defaults to POST and PATCH, the
	// methods that are not idempotent.
	Methods []string
	// MaxAttempts bounds the attempts of one request, the first included.
	// Defaults to 5.
	MaxAttempts int
	// MinDelay is the backoff before the first retry: the n-th waits
	// between half and all of MinDelay·2^(n−1), at random. Defaults to
	// 100ms.
	MinDelay time.Duration
	// MaxDelay caps every wait: the backoff, and what Retry-After asks for.
	// Defaults to 10s.
	MaxDelay time.Duration
	// MaxBufferedBody is the largest body the Transport buffers to send it
	// again, for a request without GetBody; a larger one is
	// ErrBodyNotResendable, before anything is sent. Defaults to 1 MiB.
	MaxBufferedBody int64
	// NewKey mints the key of a request that carries none. Defaults to a
	// random UUIDv7 (RFC 9562): unique without coordination, and sorted by
	// time in the server's index. A key must be 1 to MaxKeyLen bytes of
	// printable ASCII (the Transport quotes it); another is ErrInvalid,
	// before anything is sent.
	NewKey func() (string, error)
	// OnRetry, when set, is called before each retry with the attempt that
	// failed (1 for the first), its response (nil after a network error;
	// its body is closed) and its error. Defaults to none.
	OnRetry func(attempt int, resp *http.Response, err error)
	// MeterProvider receives the Transport's metrics (docs/idempotency.md,
	// "Metrics"). Defaults to none: nothing is recorded.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span per keyed request, over all its
	// attempts. Defaults to none: no span is started.
	TracerProvider trace.TracerProvider
}

func (c *Config) withDefaults() Config {
	var d Config
	if c != nil {
		d = *c
	}
	if d.Base == nil {
		d.Base = http.DefaultTransport
	}
	if d.Methods == nil {
		d.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if d.MaxAttempts == 0 {
		d.MaxAttempts = 5
	}
	if d.MinDelay == 0 {
		d.MinDelay = 100 * time.Millisecond
	}
	if d.MaxDelay == 0 {
		d.MaxDelay = 10 * time.Second
	}
	if d.MaxBufferedBody == 0 {
		d.MaxBufferedBody = 1 << 20
	}
	if d.NewKey == nil {
		d.NewKey = func() (string, error) {
			id, err := uuid.NewV7()
			return id.String(), err
		}
	}
	return d
}

func (c Config) validate() error {
	switch {
	case c.MaxAttempts < 1:
		return fmt.Errorf("%w: MaxAttempts %d must be ≥ 1", ErrInvalid, c.MaxAttempts)
	case c.MinDelay < 0 || c.MaxDelay < c.MinDelay:
		return fmt.Errorf("%w: delays must satisfy 0 ≤ MinDelay (%v) ≤ MaxDelay (%v)", ErrInvalid, c.MinDelay, c.MaxDelay)
	case c.MaxBufferedBody < 0:
		return fmt.Errorf("%w: MaxBufferedBody %d must not be negative", ErrInvalid, c.MaxBufferedBody)
	}
	return nil
}

// Transport is an http.RoundTripper that keys and retries requests, as the
// package doc says. It is safe for concurrent use; the zero value is not
// usable: call NewTransport.
type Transport struct {
	cfg Config
	tel *telemetryOf
}

// NewTransport returns a Transport configured by cfg (nil: the defaults).
// A bad cfg is an error matching ErrInvalid.
func NewTransport(cfg *Config) (*Transport, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Transport{cfg: c, tel: newTelemetry(c.MeterProvider, c.TracerProvider)}, nil
}

// RoundTrip implements http.RoundTripper. It does not change req: each
// attempt is a clone carrying the key.
func (t *Transport) RoundTrip(req *http.Request) (_ *http.Response, err error) {
	keys := req.Header.Values(HeaderKey)
	unkeyed := len(keys) == 0 && !slices.Contains(t.cfg.Methods, req.Method)
	if unkeyed && !failpoint.Mutant("idempotency.client.unkeyed") { // the mutant retries it, keyless
		return t.cfg.Base.RoundTrip(req) // not keyed: once, as it is
	}
	ctx, span := t.tel.tracer.Start(req.Context(), "idempotency.client.RoundTrip")
	attempts := 0
	defer func() {
		if span.Recording() {
			span.Set(attribute.Int(telemetry.Attempt, attempts))
		}
		span.End(err)
	}()
	key, err := t.key(keys)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	if unkeyed {
		key = "" // only under the mutant: a request nobody keyed stays keyless
	}
	body, err := resendable(req, t.cfg.MaxBufferedBody)
	if err != nil {
		return nil, err
	}
	for attempts = 1; ; attempts++ {
		if failpoint.Mutant("idempotency.client.same-key") && attempts > 1 && len(keys) == 0 {
			key, _ = t.key(nil) // the mutant keys each attempt afresh
		}
		resp, err := t.attempt(ctx, req, key, body, attempts)
		wait, retry := t.retryable(ctx, resp, err)
		if !retry {
			return resp, err
		}
		if attempts == t.cfg.MaxAttempts {
			t.tel.giveUps.Add(ctx, 1)
			if err != nil {
				return nil, fmt.Errorf("idempotency/client: %s %s: gave up after %d attempts with key %s: %w", req.Method, req.URL.Redacted(), attempts, key, err)
			}
			return resp, nil
		}
		discard(resp)
		if t.cfg.OnRetry != nil {
			t.cfg.OnRetry(attempts, resp, err)
		}
		t.tel.retried(ctx, resp, err)
		if wait == 0 {
			wait = t.backoff(attempts)
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("idempotency/client: %s %s: %w after %d attempts with key %s (last: %v)",
				req.Method, req.URL.Redacted(), err, attempts, key, lastError(resp, err))
		}
	}
}

// key returns the request's key, as the caller gave it, or a new one, as
// a structured-field string ("…").
func (t *Transport) key(keys []string) (string, error) {
	switch len(keys) {
	case 1:
		if strings.Trim(keys[0], " \t") == "" {
			return "", fmt.Errorf("%w: an empty Idempotency-Key", ErrInvalid)
		}
		return keys[0], nil
	case 0:
		k, err := t.cfg.NewKey()
		if err != nil {
			return "", fmt.Errorf("idempotency/client: new key: %w", err)
		}
		return quote(k)
	}
	return "", fmt.Errorf("%w: %d Idempotency-Key headers, the draft allows one", ErrInvalid, len(keys))
}

// MaxKeyLen is the longest key NewKey may mint, in bytes: the server's
// bound (idempotency.MaxKeyLen).
const MaxKeyLen = 255

// quote returns k as a structured-field string (RFC 9651): between quotes,
// with \" and \\ escaped. A key that is empty, longer than MaxKeyLen or not
// printable ASCII has no such form: ErrInvalid.
func quote(k string) (string, error) {
	if k == "" || len(k) > MaxKeyLen {
		return "", fmt.Errorf("%w: NewKey minted a key of %d bytes, want 1 to %d", ErrInvalid, len(k), MaxKeyLen)
	}
	var b strings.Builder
	b.Grow(len(k) + 2)
	b.WriteByte('"')
	for i := range len(k) {
		c := k[i]
		if c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("%w: NewKey minted a key with byte %#x, want printable ASCII", ErrInvalid, c)
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), nil
}

// attempt sends one attempt of req: a clone with key and a fresh body.
func (t *Transport) attempt(ctx context.Context, req *http.Request, key string, body func() (io.ReadCloser, error), n int) (*http.Response, error) {
	r := req.Clone(ctx)
	if key != "" {
		r.Header.Set(HeaderKey, key)
	}
	if body != nil {
		r.GetBody = body
		if n > 1 || req.GetBody == nil {
			b, err := body()
			if err != nil {
				return nil, fmt.Errorf("%w: GetBody: %w", ErrBodyNotResendable, err)
			}
			r.Body = b
		}
	}
	return t.cfg.Base.RoundTrip(r)
}

// retryable says whether an attempt's outcome calls for another attempt,
// and how long the server asked to wait (0: the backoff decides).
func (t *Transport) retryable(ctx context.Context, resp *http.Response, err error) (time.Duration, bool) {
	switch {
	case ctx.Err() != nil:
		return 0, false // the caller gave up: its error, or the answer it has
	case err != nil:
		return 0, !errors.Is(err, ErrBodyNotResendable)
	case resp.Header.Get(HeaderReplayed) == "true":
		return 0, false // the stored outcome: it will not change
	}
	switch s := resp.StatusCode; {
	case s == http.StatusRequestTimeout, s == http.StatusConflict, s == http.StatusTooEarly,
		s == http.StatusTooManyRequests, s >= 500:
		return retryAfter(resp.Header.Get("Retry-After"), time.Now(), t.cfg.MaxDelay), true
	}
	return 0, false
}

// retryAfter parses a Retry-After value, delay-seconds or an HTTP date,
// into a wait capped at limit; 0 when it is absent or unreadable.
func retryAfter(v string, now time.Time, limit time.Duration) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		if s > int64(limit/time.Second) {
			return limit
		}
		return time.Duration(s) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil {
		return min(max(at.Sub(now), 0), limit)
	}
	return 0
}

// backoff is the wait before retry n (the n-th failed attempt), when the
// server asked for none: between half and all of MinDelay·2^(n−1), capped
// at MaxDelay.
func (t *Transport) backoff(n int) time.Duration {
	d := t.cfg.MaxDelay
	if n-1 < 62 && t.cfg.MinDelay <= t.cfg.MaxDelay>>(n-1) {
		d = t.cfg.MinDelay << (n - 1)
	}
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// resendable returns how to make req's body again: GetBody, or a buffer
// of the body (closing req's); nil for a request without a body.
func resendable(req *http.Request, limit int64) (func() (io.ReadCloser, error), error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.GetBody != nil {
		return req.GetBody, nil
	}
	defer req.Body.Close()
	if req.ContentLength > limit {
		return nil, fmt.Errorf("%w: a body of %d bytes without GetBody is over MaxBufferedBody (%d)", ErrBodyNotResendable, req.ContentLength, limit)
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: reading it: %w", ErrBodyNotResendable, err)
	case int64(len(b)) > limit:
		return nil, fmt.Errorf("%w: a body without GetBody is over MaxBufferedBody (%d bytes)", ErrBodyNotResendable, limit)
	}
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// discard reads a little of a response that will be retried, so that its
// connection may be reused, and closes it.
func discard(resp *http.Response) {
	if resp == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

func lastError(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}
