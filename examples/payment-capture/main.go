// Command payment-capture is the migration guide from a lock around a
// payment capture to idempotency keys (package idempotency): a capture whose
// first worker pauses past its lease while the client's retry runs. See
// README.md.
//
//	go run ./examples/payment-capture [-postgres URL|memory] [-mode lock|alternative|both] [-pause=false]
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/examples/internal/backend"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/migrate"
)

//go:embed schema.sql
var schemaSQL string

const (
	payment = "pay-1"
	amount  = 4200            // cents
	ttl     = 1 * time.Second // the lock's lease, and each leased attempt's
)

type config struct {
	// DB is the database; nil runs everything on the memory backends.
	DB *pgxpool.Pool
	// Mode is "lock" (the code being replaced), "alternative" (idempotency
	// keys) or "both".
	Mode string
	// Pause stops the first worker after its provider call (transactional
	// mode: after its write) until its lease has expired and the client's
	// retry has been answered.
	Pause bool
}

func main() {
	pg := flag.String("postgres", os.Getenv("DATABASE_URL"), `PostgreSQL URL; "memory" for the memory backends; empty: a throwaway local PostgreSQL if its binaries exist, else memory`)
	mode := flag.String("mode", "both", "lock, alternative or both")
	pause := flag.Bool("pause", true, "pause the first worker past its lease")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := open(ctx, *pg, config{Mode: *mode, Pause: *pause}); err != nil {
		fmt.Fprintln(os.Stderr, "payment-capture:", err)
		os.Exit(1)
	}
}

func open(ctx context.Context, pg string, cfg config) error {
	b, err := backend.Open(ctx, pg, os.Stdout)
	if err != nil {
		return err
	}
	defer b.Close()
	cfg.DB = b.Pool
	return run(ctx, cfg, os.Stdout)
}

// run captures the payment once per approach the mode selects and prints
// one line per approach (four for the HTTP exchange).
func run(ctx context.Context, cfg config, w io.Writer) error {
	lock, alt := cfg.Mode == "lock" || cfg.Mode == "both", cfg.Mode == "alternative" || cfg.Mode == "both"
	if !lock && !alt {
		return fmt.Errorf("unknown -mode %q (want lock, alternative or both)", cfg.Mode)
	}
	if cfg.DB != nil {
		if err := migrate.Up(ctx, cfg.DB, migrate.Names{}, fencedlock.Migrations(), idempotency.Migrations()); err != nil {
			return err
		}
		if _, err := cfg.DB.Exec(ctx, schemaSQL); err != nil {
			return err
		}
	}
	if lock {
		for _, fenced := range []bool{false, true} {
			label := "lock (naive)"
			if fenced {
				label = "lock (fenced)"
			}
			if err := runLock(ctx, cfg, w, label, fenced); err != nil {
				return fmt.Errorf("%s: %w", label, err)
			}
		}
	}
	if alt {
		if err := runTransactional(ctx, cfg, w); err != nil {
			return fmt.Errorf("transactional: %w", err)
		}
		if err := runLeased(ctx, cfg, w); err != nil {
			return fmt.Errorf("leased: %w", err)
		}
		if err := runHTTP(ctx, cfg, w); err != nil {
			return fmt.Errorf("http: %w", err)
		}
	}
	return nil
}

// --- The payment provider -------------------------------------------------------

// provider is the payment provider, in process. Every call charges the
// customer's card, except a call carrying an idempotency key that the
// provider has seen before: it charges nothing and returns the first call's
// charge, as real providers do with their own idempotency keys (Stripe's
// Idempotency-Key header, Adyen's idempotency-key, …).
type provider struct {
	mu      sync.Mutex
	calls   int
	charges []string          // one charge ID per card charge
	byKey   map[string]string // idempotency key → charge ID
}

// Charge charges amount for pay and returns the charge's ID.
func (p *provider) Charge(ctx context.Context, pay string, amount int64, idempotencyKey string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err // not sent
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if id, ok := p.byKey[idempotencyKey]; ok && idempotencyKey != "" {
		return id, nil
	}
	id := fmt.Sprintf("ch_%d", len(p.charges)+1)
	p.charges = append(p.charges, id)
	if idempotencyKey != "" {
		if p.byKey == nil {
			p.byKey = map[string]string{}
		}
		p.byKey[idempotencyKey] = id
	}
	return id, nil
}

// counts returns the calls the provider received and the charges it made.
func (p *provider) counts() (calls, charges int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls, len(p.charges)
}

// --- Before: the lock-based code -------------------------------------------

// captureNaive is the code being replaced: a lease lock on the payment
// around "already captured?" → charge → record. When a holder outlives its
// lease, the client's retry finds the payment not yet recorded as captured
// and charges the card a second time.
func captureNaive(ctx context.Context, locks fencedlock.Store, l ledger, prov *provider, holder string, paused func()) error {
	lease, err := fencedlock.AcquireWait(ctx, locks, "payments/"+payment, holder, ttl, waitConfig(locks))
	if err != nil {
		return err
	}
	defer func() { _ = locks.Release(context.WithoutCancel(ctx), lease) }() // ErrNotHeld once the lease has run out

	done, err := l.captured(ctx) // SELECT captured FROM payments WHERE id = $1
	if err != nil || done {
		return err
	}
	charge, err := prov.Charge(ctx, payment, amount, "") // POST /charges at the provider
	if err != nil {
		return err
	}
	paused()                     // a GC pause, swap, a VM migration, SIGSTOP …
	return l.record(ctx, charge) // INSERT INTO captures …; UPDATE payments SET captured = true …
}

// captureFenced is the same lock with fencing tokens: the read stamps the
// payment row with the lease's token, and the record is written only if no
// later token has touched the row. The stale record is refused — but the
// provider does not check tokens, so its charge stands.
func captureFenced(ctx context.Context, locks fencedlock.Store, l ledger, prov *provider, holder string, paused func()) error {
	lease, err := fencedlock.AcquireWait(ctx, locks, "payments/"+payment, holder, ttl, waitConfig(locks))
	if err != nil {
		return err
	}
	defer func() { _ = locks.Release(context.WithoutCancel(ctx), lease) }()

	done, err := l.fencedCaptured(ctx, lease.Token) // UPDATE payments SET fencing_token = $t … AND fencing_token <= $t RETURNING captured
	if err != nil || done {
		return err
	}
	charge, err := prov.Charge(ctx, payment, amount, "") // the provider cannot check lease.Token
	if err != nil {
		return err
	}
	paused()
	return l.fencedRecord(ctx, lease.Token, charge) // fenced UPDATE of captured + INSERT, one transaction
}

// runLock runs the lock-based capture, naive or fenced: worker 1 takes the
// client's request, the client's retry goes to worker 2.
func runLock(ctx context.Context, cfg config, w io.Writer, label string, fenced bool) error {
	l, locks, expire := newLockSetup(cfg.DB)
	if err := l.reset(ctx); err != nil {
		return err
	}
	prov := &provider{}
	capture := captureNaive
	if fenced {
		capture = captureFenced
	}
	err1, err2 := withPause(cfg.Pause, func(paused func()) error {
		return capture(ctx, locks, l, prov, "worker-1", paused)
	}, func() error {
		if cfg.Pause {
			if err := expire(ctx); err != nil {
				return err
			}
		}
		return capture(ctx, locks, l, prov, "worker-2", func() {})
	})
	refused := 0
	if errors.Is(err1, fencedlock.ErrFenced) {
		refused, err1 = 1, nil
	}
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	_, charges := prov.counts()
	recorded, err := l.captures(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: the provider charged %s %s; %s recorded", label, payment, times(charges), plural(recorded, "capture"))
	if refused > 0 {
		fmt.Fprintf(w, ", %d record fenced off after its pause", refused)
	}
	if charges > 1 {
		fmt.Fprint(w, " — double charge")
		if charges > recorded {
			fmt.Fprintf(w, ", %s unrecorded", plural(charges-recorded, "charge"))
		}
	}
	fmt.Fprintln(w)
	return nil
}

// --- After (a): transactional mode, for the capture's database effect -------

// captureTx is the replacement when the capture is a write in this
// database: the idempotency key is claimed in the transaction that records
// the capture, and the answer is stored with it. A duplicate waits for the
// first execution's transaction, then gets its answer; there is no lease to
// run out, because an open transaction does not expire.
func captureTx(ctx context.Context, exec idempotency.Executor, l ledger, key idempotency.Key, paused func()) (idempotency.Result, error) {
	return exec.Do(ctx, key, fingerprint(amount), func(ctx context.Context) (idempotency.Result, error) {
		n, err := l.recordIn(ctx) // on idempotency.TxFrom(ctx): INSERT INTO captures …; UPDATE payments …
		if err != nil {
			return idempotency.Result{}, err
		}
		paused() // the same pause, with the transaction open
		return idempotency.Result{Status: http.StatusCreated, Body: fmt.Appendf(nil, `{"capture":%d}`, n)}, nil
	})
}

// runTransactional sends the capture, then the client's retry — during
// worker 1's pause — and a second retry after it.
func runTransactional(ctx context.Context, cfg config, w io.Writer) error {
	exec, l, err := newTxSetup(cfg.DB)
	if err != nil {
		return err
	}
	if err := l.reset(ctx); err != nil {
		return err
	}
	key := idempotency.Key{Tenant: "shop", ID: "capture-" + payment}
	var res [3]idempotency.Result
	var errs [3]error
	errs[0], errs[1] = withPause(cfg.Pause, func(paused func()) (err error) {
		res[0], err = captureTx(ctx, exec, l, key, paused)
		return err
	}, func() (err error) {
		res[1], err = captureTx(ctx, exec, l, key, func() {})
		return err
	})
	res[2], errs[2] = captureTx(ctx, exec, l, key, func() {})
	recorded, err := l.captures(ctx)
	if err != nil {
		return err
	}
	return printAnswers(w, fmt.Sprintf("transactional: %s recorded", plural(recorded, "capture")), res[:], errs[:])
}

// --- After (b): leased mode, for the provider call ------------------------------

// captureLeased is the replacement for the provider call, which no database
// transaction can hold: the attempt holds the key with a lease and a fencing
// token, and passes the provider a key derived from the request's, the same
// for every attempt — so the provider, the only one that can, drops a
// second charge. A stale attempt's answer is refused (ErrSuperseded).
func captureLeased(ctx context.Context, exec *idempotency.Leased, prov *provider, key idempotency.Key, paused func()) (idempotency.Result, error) {
	return exec.Do(ctx, key, fingerprint(amount), func(ctx context.Context) (idempotency.Result, error) {
		a, _ := idempotency.AttemptFrom(ctx)
		charge, err := prov.Charge(ctx, payment, amount, a.DeriveKey("charge"))
		if err != nil {
			return idempotency.Result{}, err
		}
		paused() // the same pause, after the provider call
		return idempotency.Result{Status: http.StatusCreated, Body: fmt.Appendf(nil, `{"charge":%q}`, charge)}, nil
	})
}

// runLeased sends the capture through worker 1, the client's retry through
// worker 2 — during worker 1's pause, repeated while it gets 409 (in
// flight), as a client honouring Retry-After would — and a second retry
// after the pause.
func runLeased(ctx context.Context, cfg config, w io.Writer) error {
	store, expire, err := newLeasedSetup(cfg.DB)
	if err != nil {
		return err
	}
	// Each worker's process has its own renewals; worker 1's stall with it.
	worker1, worker2 := &stalling{LeaseStore: store}, &stalling{LeaseStore: store}
	exec1, err := idempotency.NewLeased(worker1, &idempotency.LeasedConfig{TTL: ttl})
	if err != nil {
		return err
	}
	exec2, err := idempotency.NewLeased(worker2, &idempotency.LeasedConfig{TTL: ttl})
	if err != nil {
		return err
	}
	prov := &provider{}
	key := idempotency.Key{Tenant: "shop", ID: "charge-" + payment}
	retry := func() (idempotency.Result, error) {
		for {
			res, err := captureLeased(ctx, exec2, prov, key, func() {})
			if !errors.Is(err, idempotency.ErrInFlight) {
				return res, err
			}
			select {
			case <-ctx.Done():
				return res, errors.Join(err, context.Cause(ctx))
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	var res [3]idempotency.Result
	var errs [3]error
	errs[0], errs[1] = withPause(cfg.Pause, func(paused func()) (err error) {
		res[0], err = captureLeased(ctx, exec1, prov, key, func() {
			worker1.stall() // a paused process renews nothing
			paused()
			worker1.resume()
		})
		return err
	}, func() (err error) {
		if cfg.Pause {
			expire()
		}
		res[1], err = retry()
		return err
	})
	res[2], errs[2] = retry()
	calls, charges := prov.counts()
	head := fmt.Sprintf("leased: the provider charged %s %s (%s, one derived key)", payment, times(charges), plural(calls, "call"))
	return printAnswers(w, head, res[:], errs[:])
}

// stalling is a LeaseStore whose renewals can be held up, as a paused
// process holds up its own keepalive.
type stalling struct {
	idempotency.LeaseStore
	mu   sync.Mutex
	gate chan struct{} // nil, or closed on resume
}

func (s *stalling) stall() { s.mu.Lock(); s.gate = make(chan struct{}); s.mu.Unlock() }

func (s *stalling) resume() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.mu.Unlock()
}

func (s *stalling) Renew(ctx context.Context, l idempotency.Lease) (idempotency.Lease, error) {
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return idempotency.Lease{}, context.Cause(ctx)
		}
	}
	return s.LeaseStore.Renew(ctx, l)
}

// --- After (c): the HTTP middleware ---------------------------------------------

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

// --- The ledger: where captures are recorded ---------------------------------------

// ledger is the payment's capture records as the code sees them: the
// payments and captures tables, or variables when running on the memory
// backend.
type ledger interface {
	reset(ctx context.Context) error
	captured(ctx context.Context) (bool, error)
	record(ctx context.Context, charge string) error
	fencedCaptured(ctx context.Context, token int64) (bool, error)
	fencedRecord(ctx context.Context, token int64, charge string) error
	// recordIn records a capture in the transaction of the idempotency
	// claim (idempotency.TxFrom) and returns the payment's capture count.
	recordIn(ctx context.Context) (int, error)
	captures(ctx context.Context) (int, error)
}

// pgLedger is the payments and captures tables.
type pgLedger struct{ db *pgxpool.Pool }

// fence makes the payments table's reads and writes fenced by token.
var fence = fencedlock.Fence{Table: "payments", Key: "id", TokenColumn: "fencing_token"}

func (l pgLedger) reset(ctx context.Context) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM captures WHERE payment = $1`, payment); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO payments (id, amount) VALUES ($1, $2)
			ON CONFLICT (id) DO UPDATE SET captured = false, fencing_token = 0`, payment, amount)
		return err
	})
}

func (l pgLedger) captured(ctx context.Context) (done bool, err error) {
	err = l.db.QueryRow(ctx, `SELECT captured FROM payments WHERE id = $1`, payment).Scan(&done)
	return done, err
}

// insertCapture adds a capture row in tx and returns the payment's capture
// count.
func insertCapture(ctx context.Context, tx pgx.Tx, charge *string) (n int, err error) {
	if _, err := tx.Exec(ctx, `INSERT INTO captures (payment, charge, amount) VALUES ($1, $2, $3)`, payment, charge, amount); err != nil {
		return 0, err
	}
	err = tx.QueryRow(ctx, `SELECT count(*) FROM captures WHERE payment = $1`, payment).Scan(&n)
	return n, err
}

func (l pgLedger) record(ctx context.Context, charge string) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE payments SET captured = true WHERE id = $1`, payment); err != nil {
			return err
		}
		_, err := insertCapture(ctx, tx, &charge)
		return err
	})
}

func (l pgLedger) fencedCaptured(ctx context.Context, token int64) (done bool, err error) {
	err = fence.Read(ctx, l.db, payment, token, "captured", &done)
	return done, err
}

func (l pgLedger) fencedRecord(ctx context.Context, token int64, charge string) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		if err := fence.Update(ctx, tx, payment, token, "captured = true"); err != nil {
			return err
		}
		_, err := insertCapture(ctx, tx, &charge)
		return err
	})
}

func (l pgLedger) recordIn(ctx context.Context) (int, error) {
	tx, ok := idempotency.TxFrom(ctx)
	if !ok {
		return 0, errors.New("payment-capture: no idempotency transaction in the context")
	}
	if _, err := tx.Exec(ctx, `UPDATE payments SET captured = true WHERE id = $1`, payment); err != nil {
		return 0, err
	}
	return insertCapture(ctx, tx, nil)
}

func (l pgLedger) captures(ctx context.Context) (n int, err error) {
	err = l.db.QueryRow(ctx, `SELECT count(*) FROM captures WHERE payment = $1`, payment).Scan(&n)
	return n, err
}

// memLedger is the capture records in memory; its Gate plays the part of
// the token column.
type memLedger struct {
	mu       sync.Mutex
	done     bool
	recorded []string // charge IDs; "" for transactional mode
	gate     fencedlock.Gate
}

func (l *memLedger) reset(context.Context) error {
	l.mu.Lock()
	l.done, l.recorded = false, nil
	l.mu.Unlock()
	return nil
}

func (l *memLedger) captured(context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done, nil
}

func (l *memLedger) add(charge string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done, l.recorded = true, append(l.recorded, charge)
	return len(l.recorded)
}

func (l *memLedger) record(_ context.Context, charge string) error {
	l.add(charge)
	return nil
}

func (l *memLedger) fencedCaptured(ctx context.Context, token int64) (done bool, err error) {
	err = l.gate.Do(token, func() error { done, err = l.captured(ctx); return err })
	return done, err
}

func (l *memLedger) fencedRecord(ctx context.Context, token int64, charge string) error {
	return l.gate.Do(token, func() error { return l.record(ctx, charge) })
}

func (l *memLedger) recordIn(context.Context) (int, error) { return l.add(""), nil }

func (l *memLedger) captures(context.Context) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recorded), nil
}

// --- Setup and the scenario ---------------------------------------------------

// newLockSetup returns the ledger, the lock service and the function that
// makes the paused worker's lease expire: on the memory backend the lock
// service's clock jumps past the lease; on PostgreSQL the database clock
// decides, so it waits for the lease to run out.
func newLockSetup(db *pgxpool.Pool) (ledger, fencedlock.Store, func(context.Context) error) {
	if db == nil {
		c := &clock.Manual{}
		locks, _ := fencedlock.NewMemory(&fencedlock.MemoryConfig{Clock: c}) // a config with a clock is valid
		return &memLedger{}, locks, func(context.Context) error { c.Advance(ttl); return nil }
	}
	locks, err := fencedlock.NewPostgres(db, nil)
	if err != nil {
		panic(err) // a nil config is valid
	}
	return pgLedger{db}, locks, func(ctx context.Context) error {
		for {
			_, held, err := locks.Holder(ctx, "payments/"+payment)
			if err != nil || !held {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// newTxSetup returns a transactional-mode executor and the ledger its work
// writes to. A duplicate waits at most 200ms for the execution in flight.
func newTxSetup(db *pgxpool.Pool) (idempotency.Executor, ledger, error) {
	const wait = 200 * time.Millisecond
	if db == nil {
		m, err := idempotency.NewMemory(&idempotency.MemoryConfig{InFlightWait: wait})
		return m, &memLedger{}, err
	}
	p, err := idempotency.NewPostgres(db, &idempotency.PostgresConfig{InFlightWait: wait})
	return p, pgLedger{db}, err
}

// newLeasedSetup returns the leased-mode store and the function that makes
// a paused attempt's lease expire on the memory backend (its clock jumps
// past the lease). On PostgreSQL the database clock decides: the retry gets
// 409 until the lease has run out.
func newLeasedSetup(db *pgxpool.Pool) (idempotency.LeaseStore, func(), error) {
	if db == nil {
		c := &clock.Manual{}
		m, err := idempotency.NewMemory(&idempotency.MemoryConfig{Clock: c})
		return m, func() { c.Advance(ttl) }, err
	}
	p, err := idempotency.NewPostgres(db, nil)
	return p, func() {}, err
}

func waitConfig(locks fencedlock.Store) *fencedlock.WaitConfig {
	cfg := &fencedlock.WaitConfig{MaxDelay: 20 * time.Millisecond}
	if w, ok := locks.(fencedlock.Wakeups); ok {
		cfg.Wakeups = w // the memory lock service wakes waiters on release
	}
	return cfg
}

// withPause runs first, then retry. With pause, first stops where it calls
// paused while retry runs, and wakes when retry has returned; without, retry
// starts once first has returned. It returns both errors.
func withPause(pause bool, first func(paused func()) error, retry func() error) (errFirst, errRetry error) {
	isPaused, resume, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	go func() {
		done <- first(func() {
			once.Do(func() {
				if pause {
					close(isPaused)
					<-resume
				}
			})
		})
	}()
	finished := false
	if pause {
		select {
		case <-isPaused:
		case errFirst = <-done: // ended without reaching its pause (e.g. an error)
			finished = true
		}
	} else {
		errFirst, finished = <-done, true
	}
	errRetry = retry()
	close(resume)
	if !finished {
		errFirst = <-done
	}
	return errFirst, errRetry
}

// fingerprint identifies a capture request's payload, so that a key reused
// for another amount is refused.
func fingerprint(amount int64) idempotency.Fingerprint {
	return idempotency.NewFingerprint([]byte("capture"), []byte(payment), fmt.Appendf(nil, "%d", amount))
}

// printAnswers prints head and the answers of the first request and the two
// retries; an error other than "in flight" or "superseded" is returned.
func printAnswers(w io.Writer, head string, res []idempotency.Result, errs []error) error {
	names := []string{"first", "retry 1", "retry 2"}
	parts := []string{head}
	for i := range res {
		var inFlight *idempotency.InFlightError
		var answer string
		switch err := errs[i]; {
		case errors.As(err, &inFlight):
			answer = "409 in flight"
		case errors.Is(err, idempotency.ErrSuperseded):
			answer = "superseded"
		case err != nil:
			return fmt.Errorf("%s: %w", names[i], err)
		default:
			answer = fmt.Sprintf("%d %s", res[i].Status, res[i].Body)
			if res[i].Replayed {
				answer += " replayed"
			}
		}
		parts = append(parts, names[i]+": "+answer)
	}
	fmt.Fprintln(w, strings.Join(parts, "; "))
	return nil
}

// times says how often: "once", "2 times".
func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// plural says how many: "1 capture", "2 captures".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
