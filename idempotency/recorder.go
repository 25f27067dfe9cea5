package idempotency

import (
	"bytes"
	"net/http"
)

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
	// The body never holds more than limit, so the subtraction cannot
	// overflow (the sum could, with a limit near math.MaxInt); once over,
	// every later write is refused.
	if r.overflow || len(p) > r.limit-r.body.Len() {
		r.overflow = true
		return 0, errResponseTooLarge
	}
	return r.body.Write(p)
}
