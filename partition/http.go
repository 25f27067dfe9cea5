package partition

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
)

// ForwardedHeader marks a request that Forward proxied to the owner; its
// value is the forwarding member's name.
const ForwardedHeader = "Lockfree-Forwarded-By"

// Forward is an example of routing HTTP requests to their key's owner. The
// returned handler serves a request whose key (key(r)) this member owns by
// running serve on the partition's executor through m.Do; it proxies a
// request whose partition another member owns to that member's Addr
// (httputil.ReverseProxy, plain HTTP); and it answers 503 Service
// Unavailable with Retry-After: 1 while the partition moves.
//
// serve writes to a buffer that is copied to the client after it returns, so
// a client that goes away cannot leave serve writing to a finished response.
// A member that receives an already forwarded request for a key it does not
// own answers 503 instead of forwarding again, so two members whose rings
// disagree for a moment cannot bounce a request between them.
func Forward(m *Member, key func(*http.Request) string, serve func(w http.ResponseWriter, r *http.Request, e Epoch)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf bufferedResponse
		err := m.Do(r.Context(), key(r), func(_ context.Context, e Epoch) error {
			buf.reset()
			serve(&buf, r, e)
			return nil
		})
		var notOwner *NotOwnerError
		switch {
		case err == nil:
			buf.copyTo(w)
		case errors.As(err, &notOwner) && notOwner.Addr != "" && r.Header.Get(ForwardedHeader) == "":
			proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(&url.URL{Scheme: "http", Host: notOwner.Addr})
				pr.Out.Host = r.Host
				pr.Out.Header.Set(ForwardedHeader, m.Name())
			}}
			proxy.ServeHTTP(w, r)
		case errors.Is(err, ErrNotOwner), errors.Is(err, ErrMoving), errors.Is(err, ErrClosed):
			w.Header().Set("Retry-After", "1")
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
}

// bufferedResponse is an http.ResponseWriter that keeps the response.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) reset() {
	b.header, b.status = http.Header{}, 0
	b.body.Reset()
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

func (b *bufferedResponse) copyTo(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	if b.status == 0 {
		b.status = http.StatusOK
	}
	w.Header().Set("Content-Length", strconv.Itoa(b.body.Len()))
	w.WriteHeader(b.status)
	w.Write(b.body.Bytes())
}
