package client_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/idempotency/client"
)

// loseFirstAnswer is a network that delivers the first request and loses
// its answer: the server charged, the client saw a broken connection.
type loseFirstAnswer struct {
	lost atomic.Bool
}

func (l *loseFirstAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil && l.lost.CompareAndSwap(false, true) {
		resp.Body.Close()
		return nil, errors.New("connection reset by peer")
	}
	return resp, err
}

// The Transport keys a POST once and resends it with the same key after
// the answer was lost. The server's middleware runs it once and replays
// the first answer to the retry.
func ExampleNewTransport() {
	var charges atomic.Int64
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charged %s", body)
	})
	store, _ := idempotency.NewMemory(nil)
	mw, _ := idempotency.NewMiddleware(store, charge, &idempotency.MiddlewareConfig{GlobalScope: true})
	srv := httptest.NewServer(mw)
	defer srv.Close()

	tr, err := client.NewTransport(&client.Config{Base: &loseFirstAnswer{}})
	if err != nil {
		panic(err)
	}
	c := &http.Client{Transport: tr}
	resp, err := c.Post(srv.URL+"/pay", "text/plain", strings.NewReader("42 EUR"))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body), resp.Header.Get("Idempotent-Replayed"), charges.Load())
	// Output: 201 charged 42 EUR true 1
}
