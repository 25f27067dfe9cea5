package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/lockfree-go/lockfree/idempotency"
)

// The replacement over HTTP: idempotency.NewMiddleware in front of the
// capture handler, behind the shop's authentication.

// handler captures a payment. Behind idempotency.NewMiddleware with a
// transactional executor it runs in the claim's transaction, and its
// response is stored and sent after the commit.
func handler(l ledger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments/{id}/capture", func(w http.ResponseWriter, r *http.Request) {
		n, err := l.recordIn(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"capture":%d}`, n)
	})
	return mux
}

type clientKey struct{}

// authenticate stands for the shop's authentication: it names the API
// client that sends the request. It runs before the idempotency middleware,
// which scopes each key by that client.
func authenticate(next http.Handler) http.Handler {
	clients := map[string]string{"Bearer tok-checkout": "checkout-service"}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client, ok := clients[r.Header.Get("Authorization")]
		if !ok {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, client)))
	})
}

// apiClient is the middleware's Tenant: the authenticated client.
func apiClient(r *http.Request) (string, error) {
	client, ok := r.Context().Value(clientKey{}).(string)
	if !ok {
		return "", errors.New("no authenticated client")
	}
	return client, nil
}

// runHTTP sends the capture request, the same request again, the same key
// with another amount, and a request without a key.
func runHTTP(ctx context.Context, cfg config, w io.Writer) error {
	exec, l, err := newTxSetup(cfg.DB)
	if err != nil {
		return err
	}
	if err := l.reset(ctx); err != nil {
		return err
	}
	idem, err := idempotency.NewMiddleware(exec, handler(l), &idempotency.MiddlewareConfig{Tenant: apiClient})
	if err != nil {
		return err
	}
	srv := httptest.NewServer(authenticate(idem))
	defer srv.Close()
	steps := []struct{ what, key, body string }{
		{`POST /payments/pay-1/capture, Idempotency-Key "c-1", {"amount":4200}`, `"c-1"`, `{"amount":4200}`},
		{`the same request again`, `"c-1"`, `{"amount":4200}`},
		{`Idempotency-Key "c-1", {"amount":9900}`, `"c-1"`, `{"amount":9900}`},
		{`no Idempotency-Key`, ``, `{"amount":4200}`},
	}
	for _, s := range steps {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/payments/"+payment+"/capture", strings.NewReader(s.body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer tok-checkout")
		if s.key != "" {
			req.Header.Set(idempotency.HeaderKey, s.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "http: %s → %s", s.what, resp.Status)
		if resp.Header.Get("Content-Type") == "application/problem+json" {
			var p struct{ Title string }
			if err := json.Unmarshal(body, &p); err != nil {
				return err
			}
			fmt.Fprintf(w, ": %s", p.Title)
		} else {
			fmt.Fprintf(w, " %s", body)
		}
		if v := resp.Header.Get(idempotency.HeaderReplayed); v != "" {
			fmt.Fprintf(w, ", %s: %s", idempotency.HeaderReplayed, v)
		}
		fmt.Fprintln(w)
	}
	return nil
}
