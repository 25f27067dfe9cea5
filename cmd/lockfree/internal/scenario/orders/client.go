package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/idempotency/client"
)

// headerOp carries the operation's history ID from the client to the
// service, which stores it in the line's event: the check's By.
const headerOp = "Lockfree-Op"

// ordersTopic is the run's topic: KafkaTopic of every approach.
func ordersTopic(run string) string { return "lockfree-orders-" + run }

// kafkaTopic is what every approach declares as a KafkaUser.
type kafkaTopic struct{}

// KafkaTopic: each run gets its topic.
func (kafkaTopic) KafkaTopic(run string) string { return ordersTopic(run) }

// commits is what the approaches whose service commits each request with
// a lone COMMIT declare: the lost-reply and lost-commit faults lose that
// COMMIT's answer, and never a lock statement's, each of which commits
// alone.
type commits struct{}

// CommitsTransactions: see commits.
func (commits) CommitsTransactions() {}

// inProcess serves each request with a handler in the worker's process,
// as an HTTP server would: the request keeps its context, so that the
// service's before-write points are the operation's.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	if n, ok := req.Context().Value(sendsKey{}).(*int); ok {
		*n++
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// sendsKey keys, in a request's context, the count of its sends.
type sendsKey struct{}

// pipeline is what moves the lines from the database to the read model:
// a relay and a consumer, or a consumer alone. Every worker runs one, as
// every instance of a service would: the relays split the outbox's
// partitions, the consumers the topic's, and a worker killed or stopped
// past its lease has its share taken over.
type pipeline interface {
	// drained reports whether the pipeline has applied every line written
	// so far.
	drained(ctx context.Context) (bool, error)
	// counts are what the pipeline did besides applying lines (Counts).
	counts() map[string]int64
	close() error
}

// orderClient is a worker's client of any approach: requests through the
// idempotency client (idempotency/client), which keys each request and
// resends it after a 5xx, a 409 or a network error, to the approach's
// service, in process.
type orderClient struct {
	env     *engine.Env
	http    *http.Client
	pipe    pipeline
	closing func() error
	looked  bool // an operation looked its order up (lookup)
}

// newOrderClient makes a worker's client of service, and starts the
// worker's pipeline with newPipe.
func newOrderClient(ctx context.Context, env *engine.Env, service http.Handler, newPipe func(context.Context) (pipeline, error)) (*orderClient, error) {
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{order}/lines", service)
	mux.HandleFunc("GET /orders/{order}", flakyLookup)
	tr, err := client.NewTransport(&client.Config{Base: inProcess{mux}, MinDelay: 10 * time.Millisecond, MaxDelay: 200 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	c := &orderClient{env: env, http: &http.Client{Transport: tr}}
	if c.pipe, err = newPipe(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Op adds a line to an order: the one the fault injector sent the worker
// to, or one at random.
func (c *orderClient) Op(ctx context.Context) error {
	key := c.env.Directed()
	if key == "" {
		key = engine.Key("order-", c.env.Rand.IntN(c.env.Keys))
	}
	ctx, op, err := c.env.Invoke(ctx, key, kindAdd, nil)
	if err != nil {
		return err
	}
	pick := c.env.Rand.IntN(100)
	body, kind := hostileBody(pick)
	if kind != "" {
		op.Set("hostile", kind)
	}
	lookup := !c.looked || pick >= lookupFrom
	if lookup {
		op.Set("lookup", "unkeyed") // a meta of its own: the body may be hostile too
		c.looked = true
	}
	sends := 0
	n, err := c.send(context.WithValue(ctx, sendsKey{}, &sends), key, op.ID(), body)
	if sends > 1 {
		op.Set("retries", strconv.Itoa(sends-1))
	}
	if lookup {
		c.lookup(ctx, op, key)
	}
	return op.Finish(lineOut{N: n}, err, errRefused)
}

// lookupFrom: a client's first operation, and those whose draw (of 100)
// is at least lookupFrom, look their order up after their request: a GET,
// which the idempotency client does not key (a method outside its
// Methods) and must send once, as it is.
const lookupFrom = 96

// lookup sends the order's lookup, whose first send the service fails
// (flakyLookup): the client must hand the 503 back, not send it again. A
// second send is a broken promise of idempotency/client.
func (c *orderClient) lookup(ctx context.Context, op *engine.Invocation, order string) {
	sends := 0
	req, err := http.NewRequestWithContext(context.WithValue(ctx, sendsKey{}, &sends), http.MethodGet, "http://orders/orders/"+order, nil)
	if err != nil {
		return
	}
	if resp, err := c.http.Do(req); err == nil {
		resp.Body.Close()
	}
	if sends > 1 {
		op.Broke("the lookup of %s, a GET the idempotency client does not key, was sent %d times: it sends such a request once", order, sends)
	}
}

// flakyLookup answers an order's lookup: 503 to its first send, as a
// flaky read would, and 204 to any other.
func flakyLookup(w http.ResponseWriter, r *http.Request) {
	if n, ok := r.Context().Value(sendsKey{}).(*int); ok && *n == 1 {
		http.Error(w, "lookup failed: try again", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// send posts the request and returns the line number it was answered.
func (c *orderClient) send(ctx context.Context, order, opID, body string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://orders/orders/"+order+"/lines", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set(headerOp, opID)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusCreated:
	case http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity, http.StatusFailedDependency:
		return 0, fmt.Errorf("%w: %s: %s", errRefused, resp.Status, answer)
	case http.StatusInternalServerError:
		if notApplied(resp, answer) {
			return 0, fmt.Errorf("%w: the service undid its write (%s)", errRefused, resp.Status)
		}
		return 0, fmt.Errorf("orders: %s: %s", resp.Status, answer)
	default:
		return 0, fmt.Errorf("orders: %s: %s", resp.Status, answer)
	}
	var out lineOut
	if err := json.Unmarshal(answer, &out); err != nil {
		return 0, fmt.Errorf("orders: answer %q: %w", answer, err)
	}
	return out.N, nil
}

// Drain waits until the pipelines have applied every line written so far.
// Every worker waits, after its own last operation: together they cover
// every line, whichever worker wrote it last, and whether or not a crashed
// worker's replacement started. The pipelines run on meanwhile: the engine
// keeps a Drainer's worker until every worker has drained.
func (c *orderClient) Drain(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return until(ctx, "the read model has every line", c.pipe.drained)
}

// Counts implements engine.Counter: copiesDropped, the events the
// worker's inbox found applied by event ID and dropped (a relay's or
// producer's copy), when it dedupes by event; consumerFenced, its
// consumer's transactions the inbox refused for a newer epoch.
func (c *orderClient) Counts() map[string]int64 { return c.pipe.counts() }

func (c *orderClient) Close() error {
	errs := []error{c.pipe.close()}
	if c.closing != nil {
		errs = append(errs, c.closing())
	}
	return errors.Join(errs...)
}

// until waits until cond holds, asking every 50ms, each ask bounded by 2 s:
// a broker or a connection that does not answer is asked again.
func until(ctx context.Context, what string, cond func(ctx context.Context) (bool, error)) error {
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ok, err := cond(actx)
		cancel()
		if ok {
			return nil
		}
		if !engine.Sleep(ctx, 50*time.Millisecond) {
			return fmt.Errorf("orders: waiting until %s: %w", what, errors.Join(err, context.Cause(ctx)))
		}
	}
}
