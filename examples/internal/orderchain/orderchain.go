// Package orderchain is the rig of examples/orders. It runs one chain — an
// HTTP service, PostgreSQL, a publisher, Kafka, a consumer — on a fresh
// topic, sends the example's requests through it, loses one answer on each
// hop at a chosen request, and prints what the database and the read model
// hold.
//
// The faults are placed, not timed: each fires at the request it names,
// and Run waits on conditions, never on sleeps, so the output is the same
// on every run. Each injector counts what it did; Run fails when a fault
// did not happen, so the output never claims one that missed.
package orderchain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/idempotency/client"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// Faults names, for each fault, the item of the request it hits; "" for
// none.
type Faults struct {
	Answer  string // the service's answer is lost; the client retries
	Publish string // the broker's answer to the publish is lost; the publisher sends again
	Commit  string // the answer to the consumer's COMMIT is lost; it reads the event again
	Stop    string // the publisher stops between the commit and the publish
}

// Request is one of the client's requests: add Item to Order.
type Request struct{ Order, Item string }

// Requests makes the requests "order item", … name.
func Requests(names ...string) []Request {
	var reqs []Request
	for _, n := range names {
		order, item, _ := strings.Cut(n, " ")
		reqs = append(reqs, Request{Order: order, Item: item})
	}
	return reqs
}

// Env is what a chain is built on; Run makes a fresh one per chain.
type Env struct {
	DB      *pgxpool.Pool
	Brokers []string
	Topic   string // a fresh topic of one partition
	Faults  Faults
	// Kafka is the publisher's way to the brokers (its Transport): it loses
	// the answer to the publish of Faults.Publish's event.
	Kafka *Kafka
	// Consumer is the consumer's pool; LoseCommitOf(Faults.Commit, …) wraps
	// the consumer's handler.
	Consumer *Postgres
	// Pause pauses a relay started with Pause.Context after it published
	// Faults.Stop's event, before its delete.
	Pause *Pause
	died  atomic.Int64
	stops []func() // what Run stops after the chain
}

// Dies reports whether the service dies after writing item: once, for
// Faults.Stop.
func (e *Env) Dies(item string) bool {
	return item != "" && item == e.Faults.Stop && e.died.CompareAndSwap(0, 1)
}

// OutboxEmpty reports whether the relays have published every event.
func (e *Env) OutboxEmpty(ctx context.Context) (empty bool, err error) {
	err = e.DB.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM lockfree_outbox_events)`).Scan(&empty)
	return empty, err
}

// Chain is one approach, built on an Env.
type Chain struct {
	// Service serves POST /orders/{order}/lines.
	Service http.Handler
	// Consumed returns the offset of the next message the consumer
	// applies.
	Consumed func(ctx context.Context) (int64, error)
	// Settle, when set, runs after each request's answer.
	Settle func(ctx context.Context, item string) error
	// Stop stops the chain's publishers and consumers.
	Stop func()
}

// Run builds a chain on a fresh Env, sends reqs through it one after
// another with an idempotency/client Transport, waits until its consumer
// has read every record, and prints two lines, each starting with label:
// the lines in the database, and those in the read model.
func Run(ctx context.Context, w io.Writer, label string, db *pgxpool.Pool, brokers []string, faults Faults, reqs []Request,
	build func(context.Context, *Env) (*Chain, error)) (err error) {
	env := &Env{DB: db, Brokers: brokers, Faults: faults, Pause: &Pause{}}
	env.Topic = fmt.Sprintf("lockfree-example-orders-%08x", rand.Uint32())
	if err := reset(ctx, db, reqs); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := kafkawriter.CreateTopic(tctx, brokers, env.Topic, 1, 1); err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = kafkawriter.DeleteTopic(dctx, brokers, env.Topic) // best effort
	}()
	if env.Kafka, err = NewKafka(brokers); err != nil {
		return err
	}
	defer env.Kafka.Close()
	if faults.Publish != "" {
		env.Kafka.LoseAnswer(itemJSON(faults.Publish))
	}
	if env.Consumer, err = NewPostgres(ctx, db); err != nil {
		return err
	}
	defer env.Consumer.Close()
	defer env.Pause.Resume()
	chain, err := build(ctx, env)
	if err != nil {
		return err
	}
	defer func() {
		for _, stop := range env.stops {
			stop()
		}
		chain.Stop()
	}()
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{order}/lines", chain.Service)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	lost := &LostHTTP{Marker: itemJSON(faults.Answer)}
	tr, err := client.NewTransport(&client.Config{Base: lost, MinDelay: 10 * time.Millisecond, MaxDelay: 200 * time.Millisecond, MaxAttempts: 10})
	if err != nil {
		return err
	}
	c := &http.Client{Transport: tr}
	for _, r := range reqs {
		if r.Item == faults.Stop {
			env.Pause.AtDelete()
		}
		if err := send(c, srv.URL, r); err != nil {
			return err
		}
		if chain.Settle != nil {
			if err := chain.Settle(ctx, r.Item); err != nil {
				return err
			}
		}
	}
	records, err := Records(ctx, brokers, env.Topic)
	if err != nil {
		return err
	}
	if err := Until(ctx, "the consumer has read every record", func(ctx context.Context) (bool, error) {
		next, err := chain.Consumed(ctx)
		return next >= records, err
	}); err != nil {
		return err
	}
	if err := bit(faults, lost.Lost(), env.Kafka.Lost(), env.Consumer.Lost(), env.died.Load() == 1 || env.Pause.Paused()); err != nil {
		return err
	}
	return report(ctx, w, label, db, len(reqs), records)
}

// itemJSON is how item appears in a request and in an event: "" for none.
func itemJSON(item string) string {
	if item == "" {
		return ""
	}
	return fmt.Sprintf(`"item":%q`, item)
}

// reset empties the tables and makes the requests' orders.
func reset(ctx context.Context, db *pgxpool.Pool, reqs []Request) error {
	var orders []string
	for _, r := range reqs {
		if !slices.Contains(orders, r.Order) {
			orders = append(orders, r.Order)
		}
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `TRUNCATE order_view, order_lines, orders`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO orders (id) SELECT unnest($1::text[])`, orders)
		return err
	})
}

// send posts r and checks that it was accepted.
func send(c *http.Client, url string, r Request) error {
	resp, err := c.Post(url+"/orders/"+r.Order+"/lines", "application/json", strings.NewReader("{"+itemJSON(r.Item)+"}"))
	if err != nil {
		return fmt.Errorf("%s %s: %w", r.Order, r.Item, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("%s %s: %s %s", r.Order, r.Item, resp.Status, body)
	}
	return nil
}

// bit fails unless every fault that f names happened once.
func bit(f Faults, answers, publishes, commits int64, stopped bool) error {
	var errs []error
	check := func(item, what string, ok bool) {
		if item != "" && !ok {
			errs = append(errs, fmt.Errorf("the fault at %s (%s) did not happen", item, what))
		}
	}
	check(f.Answer, "lost HTTP answer", answers == 1)
	check(f.Publish, "lost publish answer", publishes == 1)
	check(f.Commit, "lost COMMIT answer", commits == 1)
	check(f.Stop, "publisher stopped", stopped)
	return errors.Join(errs...)
}

// row is a line of an order: in the database, or applied to the read
// model.
type row struct {
	order string
	n     int
	item  string
}

// report prints the database's lines and the read model's, and what the
// read model got wrong against the database.
func report(ctx context.Context, w io.Writer, label string, db *pgxpool.Pool, requests int, records int64) error {
	written, err := query(ctx, db, `SELECT order_id, n, item FROM order_lines ORDER BY order_id, n`)
	if err != nil {
		return err
	}
	applied, err := query(ctx, db, `SELECT order_id, n, item FROM order_view ORDER BY id`)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: database %s: %d lines for %d requests\n", label, items(written), len(written), requests)
	fmt.Fprintf(w, "%s: read model %s, from %d Kafka records: %s\n", label, items(applied), records, compare(written, applied))
	return nil
}

func query(ctx context.Context, db *pgxpool.Pool, sql string) ([]row, error) {
	rows, _ := db.Query(ctx, sql)
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.order, &x.n, &x.item)
		return x, err
	})
}

// items lists each order's items, orders sorted, items in rows' order:
// "o-1 book pen, o-2 mug".
func items(rows []row) string {
	var orders []string
	byOrder := map[string][]string{}
	for _, r := range rows {
		if _, ok := byOrder[r.order]; !ok {
			orders = append(orders, r.order)
		}
		byOrder[r.order] = append(byOrder[r.order], r.item)
	}
	slices.Sort(orders)
	var parts []string
	for _, o := range orders {
		parts = append(parts, o+" "+strings.Join(byOrder[o], " "))
	}
	return strings.Join(parts, ", ")
}

// compare says what applied, in application order, got wrong against
// written: lines applied twice, lines never applied, lines applied after a
// later line of their order.
func compare(written, applied []row) string {
	type id struct {
		order string
		n     int
	}
	seen, last := map[id]bool{}, map[string]int{}
	twice, late := 0, 0
	for _, r := range applied {
		k := id{r.order, r.n}
		switch {
		case seen[k]:
			twice++
		case r.n < last[r.order]:
			late++
		}
		seen[k], last[r.order] = true, max(last[r.order], r.n)
	}
	lost := 0
	for _, r := range written {
		if !seen[id{r.order, r.n}] {
			lost++
		}
	}
	if twice+late+lost == 0 {
		return "each line once, in order"
	}
	var out []string
	for _, f := range []struct {
		n    int
		what string
	}{{twice, "applied twice"}, {lost, "lost"}, {late, "out of order"}} {
		if f.n > 0 {
			out = append(out, fmt.Sprintf("%d %s %s", f.n, map[bool]string{true: "line", false: "lines"}[f.n == 1], f.what))
		}
	}
	return strings.Join(out, ", ")
}
