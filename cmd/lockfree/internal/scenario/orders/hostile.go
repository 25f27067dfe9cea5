package orders

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// The limits of every approach's service: the alternative's middleware
// (MaxRequestBody, MaxResponseBody), and the others' own check of the
// body. The hostile requests meet them.
const (
	maxRequestBody  = 256
	maxResponseBody = 512
)

// lineRequest is a request's body: the answer's length (Pad: the answer
// is padded with spaces to it), and its hostile parts.
type lineRequest struct {
	Pad int `json:"pad,omitempty"`
	// PadOnce pads the answer to the request's first send only.
	PadOnce bool `json:"pad_once,omitempty"`
	// Fail makes the service fail: "once", on the request's first send,
	// after its write, inside its transaction (500); "always", before it
	// writes, for good (424: a dependency refused the line).
	Fail string `json:"fail,omitempty"`
	// Invalid makes the service refuse the request (422) before it writes.
	Invalid bool   `json:"invalid,omitempty"`
	Filler  string `json:"filler,omitempty"` // makes the body too large
}

// hostileBody returns the body of a client's next request, drawn from
// pick (0 to 99): 8 requests in 100 are hostile. Each ends definite
// (applied, or refused) unless a fault takes its answers: an answer over
// MaxResponseBody comes on the first send only, since the alternative's
// middleware rolls its write back and answers a 500 its client cannot tell
// from a lost COMMIT's.
func hostileBody(pick int) (body, kind string) {
	var req lineRequest
	switch pick {
	case 0, 1:
		req.Pad, kind = maxResponseBody, "answer-at-limit"
	case 2, 3:
		req.Pad, req.PadOnce, kind = maxResponseBody+1, true, "answer-over-limit"
	case 4:
		req.Filler, kind = strings.Repeat("x", maxRequestBody), "request-over-limit"
	case 5:
		req.Invalid, kind = true, "invalid"
	case 6:
		req.Fail, kind = "once", "fails-once"
	case 7:
		req.Fail, kind = "always", "fails-always"
	}
	b, _ := json.Marshal(req) // no error: strings, numbers and bools
	return string(b), kind
}

// errRefused is a request the service refused before it wrote (413, 422,
// 424), or whose write it undid (notApplied).
var errRefused = errors.New("orders: request refused")

// readRequest reads r's body, at most maxRequestBody bytes, or answers
// 413 (too large) or 422 (invalid or unreadable) before anything is
// written.
func readRequest(w http.ResponseWriter, r *http.Request) (lineRequest, bool) {
	var req lineRequest
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return req, false
	case err != nil || json.Unmarshal(b, &req) != nil || req.Invalid:
		http.Error(w, "invalid line", http.StatusUnprocessableEntity)
		return req, false
	}
	return req, true
}

// sends is a worker's record of the requests its service has seen.
type sends struct{ seen sync.Map }

// first records a send of the operation opID, and reports whether it is
// the operation's first.
func (s *sends) first(opID string) bool {
	_, again := s.seen.LoadOrStore(opID, true)
	return !again
}

// failure is the handler error that req's send meets after its write,
// inside its transaction, or nil.
func (req lineRequest) failure(first bool) error {
	if req.Fail == "once" && first {
		return errHandler
	}
	return nil
}

// refusedDependency answers 424 when req's send fails for good before it
// writes, and reports whether it did: a final answer, stored by the
// alternative's middleware and replayed to every resend.
func (req lineRequest) refusedDependency(w http.ResponseWriter) bool {
	if req.Fail != "always" {
		return false
	}
	http.Error(w, "a dependency refused the line", http.StatusFailedDependency)
	return true
}

// pad is the length of the answer to req's send.
func (req lineRequest) pad(first bool) int {
	if req.PadOnce && !first {
		return 0
	}
	return req.Pad
}

// errHandler is the handler error of a request that asks for one.
var errHandler = errors.New("orders: the handler failed")

// problemNotApplied types the answer to a request whose handler failed
// after its write and undid it (its transaction rolled back): the client
// may retry, and may take it as refused once it stops.
const problemNotApplied = "urn:lockfree:orders:not-applied"

// fail answers a request that failed with err: 500, typed not applied for
// errHandler.
func fail(w http.ResponseWriter, err error) {
	if errors.Is(err, errHandler) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"type":%q,"status":500}`, problemNotApplied)
		return
	}
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// notApplied reports whether resp is a fail answer typed not applied.
func notApplied(resp *http.Response, body []byte) bool {
	var p struct {
		Type string `json:"type"`
	}
	return resp.StatusCode == http.StatusInternalServerError && resp.Header.Get("Content-Type") == "application/problem+json" &&
		json.Unmarshal(body, &p) == nil && p.Type == problemNotApplied
}

// answer writes the service's answer to an accepted request, padded with
// spaces to pad bytes.
func answer(w http.ResponseWriter, n int64, pad int) {
	b := fmt.Appendf(nil, `{"n":%d}`, n)
	if len(b) < pad {
		b = append(b, strings.Repeat(" ", pad-len(b))...)
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(b)
}
