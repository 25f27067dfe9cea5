package partition

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// Forward is an example of routing HTTP requests to their key's owner. The
// returned handler serves a request whose key (key(r)) this member owns by
// running serve on the partition's executor through m.Do; it proxies a
// request whose partition another member owns to that member's Addr
// (httputil.ReverseProxy, plain HTTP), signing it as forwarded by this
// member (ForwardedHeader, ForwardConfig.Secret); and it answers 503 Service
// Unavailable with Retry-After: 1 while the partition moves. A serve that
// panics gets 500 Internal Server Error; the panic's value and stack go to
// Config.Logger, and the process and the executor live on.
//
// Forward reads the request body before it queues serve, on the request's
// goroutine, so that a client sending its body slowly holds no executor: at
// most ForwardConfig.MaxRequestBody bytes (more: 413 Content Too Large),
// within ForwardConfig.RequestBodyTimeout (slower: 408 Request Timeout).
// serve then reads the body from memory.
//
// Forward's own answers (400 to 599) have an application/problem+json body
// that names nothing internal: no member, address, partition or error text.
// The errors behind its 500 and 502 answers go to Config.Logger.
//
// serve writes to a buffer that is copied to the client after it returns, so
// a client that goes away cannot leave serve writing to a finished response.
// Informational answers (1xx but 101, e.g. 103 Early Hints) go to the client
// as serve sends them, with serve's headers at that moment, as net/http
// sends them; the final status is serve's.
//
// A member that receives a request forwarded by a peer (a valid signature)
// for a key it does not own answers 503 instead of forwarding again, so two
// members whose rings disagree for a moment cannot bounce a request between
// them. Without a valid signature, the header is removed: serve sees
// ForwardedHeader only as the name of the peer that forwarded the request.
func Forward(m *Member, key func(*http.Request) string, serve func(w http.ResponseWriter, r *http.Request, e Epoch)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer := m.forwardedBy(r, time.Now())
		r = r.Clone(r.Context()) // serve's header, the peer's name or nothing
		r.Header.Del(ForwardedHeader)
		if peer != "" {
			r.Header.Set(ForwardedHeader, peer)
		}
		// The mutant reads the body on the executor, as Forward once did:
		// a client that sends it slowly holds the partition's other keys.
		late := failpoint.Mutant("partition.forward.slow-body")
		var bodyErr error
		if !late {
			if bodyErr = m.readRequestBody(w, r); bodyErr != nil {
				refuseBody(w, bodyErr)
				return
			}
		}
		buf := newBufferedResponse(w)
		err := m.Do(r.Context(), key(r), func(_ context.Context, e Epoch) error {
			if late {
				if bodyErr = m.readRequestBody(w, r); bodyErr != nil {
					return nil
				}
			}
			serve(buf, r, e)
			return nil
		})
		buf.close()
		var notOwner *NotOwnerError
		var panicked *PanicError
		switch {
		case err == nil && bodyErr != nil:
			refuseBody(w, bodyErr)
		case err == nil:
			buf.copyTo(w)
		case errors.As(err, &panicked):
			m.servePanic(w, panicked)
		case errors.As(err, &notOwner) && notOwner.Addr != "" && peer == "" && len(m.fwd.Secret) > 0:
			m.proxy(w, r, notOwner.Addr)
		case errors.Is(err, ErrNotOwner), errors.Is(err, ErrMoving), errors.Is(err, ErrStopped):
			w.Header().Set("Retry-After", "1")
			problem(w, http.StatusServiceUnavailable, "The request cannot be served at the moment; retry shortly.")
		default:
			m.warn("partition: request failed", telemetry.Err(err))
			problem(w, http.StatusInternalServerError, "The request could not be completed.")
		}
	})
}

// readBody reads r's body whole on the request's goroutine, before serve is
// queued: a client that sends its body slowly then holds no executor, and
// the other keys of its partition do not wait for it. It reads at most
// MaxRequestBody bytes (a larger body is a *http.MaxBytesError, also when
// its Content-Length announces it) until RequestBodyTimeout from now.
func (m *Member) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	limit := m.fwd.MaxRequestBody
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(m.fwd.RequestBodyTimeout)) == nil {
		// Cleared once read: net/http reads the connection in the
		// background while serve runs, and a read that failed at the
		// deadline would end the request's context.
		defer rc.SetReadDeadline(time.Time{})
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
}

// readRequestBody reads r's body (readBody) and leaves it in memory for
// serve.
func (m *Member) readRequestBody(w http.ResponseWriter, r *http.Request) error {
	body, err := m.readBody(w, r)
	if err != nil {
		return err
	}
	r.Body, r.ContentLength, r.TransferEncoding = http.NoBody, int64(len(body)), nil
	if len(body) > 0 {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return nil
}

// refuseBody answers a request whose body readBody refused: 413 when it was
// too large, 408 when it came too slowly, 400 when it could not be read.
func refuseBody(w http.ResponseWriter, err error) {
	var tooLarge *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooLarge):
		problem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("The request body may have at most %d bytes.", tooLarge.Limit))
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		w.Header().Set("Connection", "close")
		problem(w, http.StatusRequestTimeout, "The request body did not arrive in time.")
	default:
		problem(w, http.StatusBadRequest, "The request body could not be read.")
	}
}

// proxy forwards r to the member at addr, signed as forwarded by m.
func (m *Member) proxy(w http.ResponseWriter, r *http.Request, addr string) {
	m.tel.forwards.Add(r.Context(), 1)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: addr})
			pr.Out.Host = r.Host
			pr.Out.Header.Set(ForwardedHeader, m.signForward(pr.Out, time.Now()))
		},
		// Not ReverseProxy's default, which logs to the log package and
		// sends an empty 502.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			m.warn("partition: forwarding failed", telemetry.Err(err))
			w.Header().Set("Retry-After", "1")
			problem(w, http.StatusBadGateway, "The request could not be forwarded; retry shortly.")
		},
	}
	proxy.ServeHTTP(w, r)
}

// problem answers with an application/problem+json body (RFC 9457) whose
// detail is fixed text: the answer shows nothing of the fleet or its errors.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	// A write error means the client went away: nothing to do.
	_ = json.NewEncoder(w).Encode(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", http.StatusText(status), status, detail})
}

// servePanic answers a request whose serve panicked on the executor: 500
// with a problem body that does not show the panic (it may hold internal
// details), which goes to the member's Logger instead. http.ErrAbortHandler
// is panicked again on the handler's goroutine, so that net/http aborts the
// response as serve asked.
func (m *Member) servePanic(w http.ResponseWriter, p *PanicError) {
	if p.Value == http.ErrAbortHandler {
		panic(http.ErrAbortHandler)
	}
	if m.cfg.Logger != nil {
		m.cfg.Logger.Error("partition: handler panicked", telemetry.Member, m.cfg.Name, telemetry.Panic, p.Value, telemetry.PanicStack, string(p.Stack))
	}
	problem(w, http.StatusInternalServerError, "The request handler failed.")
}

// bufferedResponse is the http.ResponseWriter that serve writes to on the
// executor: it keeps the final response, for the handler's goroutine to
// copy to the client once serve has returned, and passes informational
// answers (1xx but 101) through to the client as serve sends them — unless
// the handler has already answered (close), as it does when the request's
// context ends while serve runs.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer

	mu     sync.Mutex // orders informational answers against close
	w      http.ResponseWriter
	closed bool
}

func newBufferedResponse(w http.ResponseWriter) *bufferedResponse {
	return &bufferedResponse{header: http.Header{}, w: w}
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if status < 100 || status > 999 {
		// net/http's own check; on the executor it becomes a 500.
		panic(fmt.Sprintf("partition: invalid WriteHeader code %v", status))
	}
	if b.status != 0 {
		return
	}
	if status < 200 && status != http.StatusSwitchingProtocols {
		b.inform(status)
		return
	}
	b.status = status
}

// inform sends an informational answer with serve's headers so far, as
// net/http does, and leaves the client's response headers as they were.
func (b *bufferedResponse) inform(status int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	h := b.w.Header()
	saved := http.Header{}
	for k, v := range b.header {
		if old, ok := h[k]; ok {
			saved[k] = old
		}
		h[k] = v
	}
	b.w.WriteHeader(status)
	for k := range b.header {
		if old, ok := saved[k]; ok {
			h[k] = old
		} else {
			delete(h, k)
		}
	}
}

// close ends the informational answers: from now on only the handler's
// goroutine writes to the client.
func (b *bufferedResponse) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

// copyTo sends the final response; serve has returned.
func (b *bufferedResponse) copyTo(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	if b.status == 0 {
		b.status = http.StatusOK
	}
	w.Header().Set("Content-Length", strconv.Itoa(b.body.Len()))
	w.WriteHeader(b.status)
	_, _ = w.Write(b.body.Bytes()) // a write error means the client went away
}
