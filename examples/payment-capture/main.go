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
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/lockfree-go/lockfree/examples/internal/demo"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
)

//go:embed schema.sql
var schemaSQL string

const (
	payment = "pay-1"
	amount  = 4200            // cents
	ttl     = 1 * time.Second // the lock's lease, and each leased attempt's
)

// config is what the program runs with. With Pause, the first worker stops
// after its provider call (transactional mode: after its write) until its
// lease has expired and the client's retry has been answered.
type config = demo.Config

func main() { demo.Main("payment-capture", "pause the first worker past its lease", run) }

// run captures the payment once per approach the mode selects and prints
// one line per approach (four for the HTTP exchange).
func run(ctx context.Context, cfg config, w io.Writer) error {
	lock, alt, err := demo.Modes(cfg.Mode)
	if err != nil {
		return err
	}
	if err := demo.Migrate(ctx, cfg.DB, schemaSQL, fencedlock.Migrations(), idempotency.Migrations()); err != nil {
		return err
	}
	if lock {
		for _, label := range []string{"lock (naive)", "lock (fenced)"} {
			if err := runLock(ctx, cfg, w, label); err != nil {
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

// wait polls a busy lock often: the example's holders are quick.
var wait = &fencedlock.WaitConfig{MaxDelay: 20 * time.Millisecond}

// --- Before: the lock-based code -------------------------------------------

// captureNaive is the code being replaced: a lease lock on the payment
// around "already captured?" → charge → record. When a holder outlives its
// lease, the client's retry finds the payment not yet recorded as captured
// and charges the card a second time.
func captureNaive(ctx context.Context, locks fencedlock.Store, l ledger, prov *provider, holder string, paused func()) error {
	lease, err := fencedlock.AcquireWait(ctx, locks, "payments/"+payment, holder, ttl, wait)
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
	lease, err := fencedlock.AcquireWait(ctx, locks, "payments/"+payment, holder, ttl, wait)
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

// runLock runs the lock-based capture, naive or fenced (by label): worker 1
// takes the client's request, the client's retry goes to worker 2.
func runLock(ctx context.Context, cfg config, w io.Writer, label string) error {
	l := newLedger(cfg.DB)
	locks, expire := demo.Locks(cfg.DB, "payments/"+payment, ttl)
	if err := l.reset(ctx); err != nil {
		return err
	}
	prov := &provider{}
	capture := captureNaive
	if label == "lock (fenced)" {
		capture = captureFenced
	}
	err1, err2 := demo.WhilePaused(cfg.Pause, func(paused func()) error {
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
	printCharges(w, label, charges, recorded, refused)
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
	res, errs := threeTimes(cfg.Pause, func(paused func()) (idempotency.Result, error) {
		return captureTx(ctx, exec, l, key, paused)
	}, nil, func() (idempotency.Result, error) { return captureTx(ctx, exec, l, key, func() {}) })
	recorded, err := l.captures(ctx)
	if err != nil {
		return err
	}
	return printAnswers(w, fmt.Sprintf("transactional: %s recorded", demo.Plural(recorded, "capture")), res, errs)
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
	worker1, exec1, err := newWorker(store)
	if err != nil {
		return err
	}
	_, exec2, err := newWorker(store)
	if err != nil {
		return err
	}
	prov := &provider{}
	key := idempotency.Key{Tenant: "shop", ID: "charge-" + payment}
	res, errs := threeTimes(cfg.Pause, func(paused func()) (idempotency.Result, error) {
		return captureLeased(ctx, exec1, prov, key, func() {
			worker1.stall() // a paused process renews nothing
			paused()
			worker1.resume()
		})
	}, expire, func() (idempotency.Result, error) {
		return whileInFlight(ctx, func() (idempotency.Result, error) { return captureLeased(ctx, exec2, prov, key, func() {}) })
	})
	calls, charges := prov.counts()
	head := fmt.Sprintf("leased: the provider charged %s %s (%s, one derived key)", payment, times(charges), demo.Plural(calls, "call"))
	return printAnswers(w, head, res, errs)
}
