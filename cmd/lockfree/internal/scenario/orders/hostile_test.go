package orders

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Each hostile request is refused before anything is written (413, 422),
// fails as it asks with an answer typed not applied, or is answered at the
// length it asks.
func TestHostileRequests(t *testing.T) {
	kinds := map[string]bool{}
	for pick := range 100 {
		body, kind := hostileBody(pick)
		kinds[kind] = true
		rec := httptest.NewRecorder()
		req, ok := readRequest(rec, httptest.NewRequest(http.MethodPost, "/orders/order-0/lines", strings.NewReader(body)))
		switch kind {
		case "request-over-limit", "invalid":
			want := map[string]int{"request-over-limit": http.StatusRequestEntityTooLarge, "invalid": http.StatusUnprocessableEntity}[kind]
			if ok || rec.Code != want {
				t.Errorf("%s: read %v, answered %d, want refused with %d", kind, ok, rec.Code, want)
			}
			continue
		case "fails-once", "fails-always":
			s := &sends{}
			first, second := req.failure(s.first("0/1")), req.failure(s.first("0/1"))
			if kind == "fails-always" {
				rec := httptest.NewRecorder()
				if !req.refusedDependency(rec) || rec.Code != http.StatusFailedDependency {
					t.Errorf("%s: answered %d, want 424", kind, rec.Code)
				}
				continue
			}
			if first == nil || second != nil {
				t.Errorf("%s: failed %v, then %v", kind, first, second)
			}
			rec := httptest.NewRecorder()
			fail(rec, first)
			if !notApplied(rec.Result(), rec.Body.Bytes()) {
				t.Errorf("%s: answered %d %q, not typed not applied", kind, rec.Code, rec.Body)
			}
		case "answer-over-limit":
			if req.pad(true) <= maxResponseBody || req.pad(false) > maxResponseBody {
				t.Errorf("%s: pads %d, then %d", kind, req.pad(true), req.pad(false))
			}
		}
		if !ok {
			t.Fatalf("%s (%s): refused with %d", kind, body, rec.Code)
		}
		rec = httptest.NewRecorder()
		answer(rec, 12, req.pad(true))
		var out lineOut
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.N != 12 || rec.Body.Len() < req.pad(true) {
			t.Errorf("%s: answer %q (%d bytes, pad %d): %v", kind, rec.Body, rec.Body.Len(), req.Pad, err)
		}
	}
	if len(kinds) != 7 {
		t.Errorf("kinds drawn: %v, want the six hostile ones and none", kinds)
	}
}
