package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/idempotency/client"
)

// The leased alternative serves its charges over HTTP, in process: the
// idempotency client (idempotency/client), which resends after a 5xx, a
// 409 or a network error with the same key, to the charge handler behind
// idempotency.Middleware on the Leased executor, with these limits. The
// hostile requests meet them.
const (
	maxChargeBody   = 256
	maxChargeAnswer = 512
)

// chargeRequest is a charge's body: its amount, and its hostile parts.
type chargeRequest struct {
	Amount int64 `json:"amount"`
	// Pad pads the answer with spaces to this length, on every send.
	Pad    int    `json:"pad,omitempty"`
	Filler string `json:"filler,omitempty"` // makes the body too large
}

// hostileCharge returns the request of a charge of amount on key, drawn
// from pick (0 to 99). Every answer of one key in overLimitOdds is over
// MaxResponseBody: the middleware spends the key with ProblemResponseLost,
// replayed to every retry, which the client takes as charged, as it is (a
// key, not a request: so that its first execution, the one that runs the
// handler, meets the limit in every short run). Of the other requests, 2
// in 100 are answered at the limit, and 1 in 100 has a body over
// MaxRequestBody, refused (413) before the handler runs.
func hostileCharge(pick int, key string, amount int64) (req chargeRequest, kind string) {
	req.Amount = amount
	switch {
	case keyHash(key)%overLimitOdds == 1: // never an expiring key's
		req.Pad, kind = maxChargeAnswer+1, "answer-over-limit"
	case pick < 2:
		req.Pad, kind = maxChargeAnswer, "answer-at-limit"
	case pick == 2:
		req.Filler, kind = strings.Repeat("x", maxChargeBody), "request-over-limit"
	}
	return req, kind
}

// overLimitOdds: one key in overLimitOdds is answered over the limit.
const overLimitOdds = 4

// errChargeTooLarge is a charge refused for its body's size (413).
var errChargeTooLarge = errors.New("payments: charge request too large")

// metaReleasedAnswered marks an operation one of whose attempts' handler
// answered, and whose key was then released instead of completed: a retry
// runs the handler again. The middleware spends such a key, also when the
// answer is too large to store (ProblemResponseLost).
const metaReleasedAnswered = "released-after-answer"

// chargeCall is one operation's charge, in its requests' context
// (chargeCallKey): what the handler needs of the operation, and what the
// client learns of its sends.
type chargeCall struct {
	ctx   context.Context // the operation's
	op    *engine.Invocation
	point string // the before-write point of the charge (chargePoint)
	// answered is the token of the last attempt whose handler answered.
	answered int64
	sends    int // the requests sent, resends included
	// stored: a send was answered by a first execution whose answer was
	// stored.
	stored bool
	// unsure: a send was answered by a server error, after which its
	// charge may have committed.
	unsure bool
}

type chargeCallKey struct{}

// newChargeClient returns a worker's client of the charge service on
// exec.
func newChargeClient(env *engine.Env, exec idempotency.Executor) (*http.Client, error) {
	service, err := idempotency.NewMiddleware(exec, chargeHandler(env), &idempotency.MiddlewareConfig{
		Tenant:         func(*http.Request) (string, error) { return "checkout", nil },
		Fingerprint:    chargeFingerprint,
		MaxRequestBody: maxChargeBody, MaxResponseBody: maxChargeAnswer,
	})
	if err != nil {
		return nil, err
	}
	tr, err := client.NewTransport(&client.Config{Base: chargeService{service}, MinDelay: 10 * time.Millisecond, MaxDelay: 200 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: tr}, nil
}

// chargeFingerprint is a charge's request: its key and amount, not its
// padding.
func chargeFingerprint(r *http.Request, body []byte) idempotency.Fingerprint {
	var req chargeRequest
	key, err := idempotency.ParseKeyHeader(r.Header.Values(idempotency.HeaderKey))
	if err != nil || json.Unmarshal(body, &req) != nil {
		return idempotency.NewFingerprint(body)
	}
	return paymentFingerprint(key, req.Amount)
}

// chargeService serves each request with the service in the worker's
// process, as an HTTP server would, and tells the request's chargeCall
// whether its answer was a first execution's, stored.
type chargeService struct{ h http.Handler }

func (s chargeService) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, req)
	call, ok := req.Context().Value(chargeCallKey{}).(*chargeCall)
	if !ok {
		return rec.Result(), nil
	}
	call.sends++
	lost := problemType(rec.Header(), rec.Body.Bytes()) == idempotency.ProblemResponseLost
	stored := rec.Code < 300 || lost
	call.unsure = call.unsure || rec.Code >= 500 && !lost
	if stored && rec.Header().Get(idempotency.HeaderReplayed) != "true" {
		call.stored = true
	}
	return rec.Result(), nil
}

// chargeHandler is the charge service, behind the middleware: the
// attempt's fenced charge (fencedCharge), answered 201 (charged now) or
// 200 (charged earlier), 422 when the key was charged for another amount,
// 503 — not stored: the key is released — when the attempt's token was
// refused or the charge failed.
func chargeHandler(env *engine.Env) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		call, ok := r.Context().Value(chargeCallKey{}).(*chargeCall)
		var req chargeRequest
		if !ok || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "invalid charge", http.StatusBadRequest)
			return
		}
		res, err := fencedCharge(call.ctx, r.Context(), env, call.op, req.Amount, call.point)
		switch {
		case errors.Is(err, idempotency.ErrKeyReused):
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if a, ok := idempotency.AttemptFrom(r.Context()); ok {
			call.answered = a.Token()
		}
		b := fmt.Appendf(nil, `{"amount":%d}`, req.Amount)
		if len(b) < req.Pad {
			b = append(b, strings.Repeat(" ", req.Pad-len(b))...)
		}
		w.WriteHeader(res.Status)
		_, _ = w.Write(b)
	}
}

// send sends the charge req and returns its outcome: nil when the key is
// charged for it (a 2xx, or ProblemResponseLost: the handler answered, its
// answer is lost), a refusal, or an error of unknown outcome.
func (c *chargeCall) send(hc *http.Client, req chargeRequest) error {
	body, _ := json.Marshal(req) // no error: strings and numbers
	r, err := http.NewRequestWithContext(context.WithValue(c.ctx, chargeCallKey{}, c), http.MethodPost, "http://payments/charges", bytes.NewReader(body))
	if err != nil {
		return err
	}
	r.Header.Set(idempotency.HeaderKey, `"`+c.op.Key()+`"`) // a payment key: printable ASCII
	resp, err := hc.Do(r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	typ := problemType(resp.Header, answer)
	switch {
	case resp.StatusCode < 300, typ == idempotency.ProblemResponseLost:
		return nil
	case resp.StatusCode == http.StatusConflict:
		return fmt.Errorf("%w: %s", idempotency.ErrInFlight, answer)
	case typ == idempotency.ProblemExpired:
		return fmt.Errorf("%w: %s", idempotency.ErrExpired, answer)
	case resp.StatusCode == http.StatusUnprocessableEntity:
		return fmt.Errorf("%w: %s", idempotency.ErrKeyReused, answer)
	case resp.StatusCode == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %s", errChargeTooLarge, answer)
	}
	return fmt.Errorf("payments: %s: %s", resp.Status, answer)
}

// outcome is err, the end of the call's sends, as the operation's result:
// a refusal after a send answered by a server error is of unknown outcome,
// since that send's charge may have committed.
func (c *chargeCall) outcome(err error) error {
	if err != nil && c.unsure {
		return fmt.Errorf("payments: after a server error, %v", err) // no longer a refusal
	}
	return err
}

// problemType is the type of a problem answer (RFC 9457), or "".
func problemType(h http.Header, body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	if h.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &p) != nil {
		return ""
	}
	return p.Type
}

// watchedLeased is the alternative's executor: a Leased that marks the
// operation given a replay with no answer (metaUnanswered), which the
// middleware cannot send.
type watchedLeased struct{ *idempotency.Leased }

func (w watchedLeased) Do(ctx context.Context, key idempotency.Key, fp idempotency.Fingerprint, fn func(ctx context.Context) (idempotency.Result, error)) (idempotency.Result, error) {
	res, err := w.Leased.Do(ctx, key, fp, fn)
	if call, ok := ctx.Value(chargeCallKey{}).(*chargeCall); ok && err == nil && res.Replayed && res.Status == 0 {
		call.op.Set(metaUnanswered, "true")
	}
	return res, err
}
