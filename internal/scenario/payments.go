package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
)

// paymentRound is how long a set of payment keys lives: each round, clients
// pick among Keys fresh keys, so a run mixes first executions (which charge,
// and may pause) with repeats of the same payment (which must not charge).
const paymentRound = time.Second

// inFlightPatience is how long a client retries a payment that another
// client is executing (the default Config.InFlightWait).
const inFlightPatience = 2 * time.Second

// paymentsDDL: charges has no unique constraint, so that the checker sees a
// double charge; payments_done is the naive lock's and the bare baseline's
// record of charged keys; payment_fences is the fenced twin's resource-side
// token (and charged flag) per key.
const paymentsDDL = `CREATE TABLE charges (
	payment_key text        NOT NULL,
	amount      bigint      NOT NULL,
	charged_by  text        NOT NULL,
	charged_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE payments_done (
	payment_key text PRIMARY KEY,
	charge      text NOT NULL
);
CREATE TABLE payment_fences (
	payment_key   text    PRIMARY KEY,
	charged       boolean NOT NULL DEFAULT false,
	fencing_token bigint  NOT NULL DEFAULT 0
)`

func init() {
	register(Scenario{
		Name:        "payments",
		Description: "clients charge a random payment key (keys repeat: retries of one payment); each key is charged exactly once",
		Approaches:  []Approach{Alternative, FencedLock, NaiveLock, Raw},
		Labels: map[Approach]string{
			Alternative: "idempotency.Do: claim sent with BEGIN → charge in the claim's tx → result sent with COMMIT",
			FencedLock:  "idempotency.Fenced: lock key → check done → fenced read → charge with fenced write → record fenced → release",
			NaiveLock:   "lease lock: lock key → check done (plain read) → charge → record unfenced → release",
			Raw:         "bare tx: INSERT charge; INSERT INTO payments_done … ON CONFLICT DO NOTHING; COMMIT, or ROLLBACK if done (no stored answer)",
		},
		Migrations: idempotency.Migrations(),
		New:        newPayments,
	})
}

// payment is what the workload knows of one key.
type payment struct {
	amount int64
	acked  atomic.Bool  // some client was told the key is charged
	unsure atomic.Int64 // operations whose fate is unknown
	// memory backends
	charges atomic.Int64
	mu      sync.Mutex // naive lock: done
	done    bool
	gate    fencedlock.Gate // fenced twin: the resource's token…
	charged bool            // …and what it guards (accessed under gate)
}

type payments struct {
	env      *Env
	approach Approach
	start    time.Time
	keys     sync.Map // string → *payment
	exec     idempotency.Executor
	fence    fencedlock.Fence
	seq      atomic.Int64
}

func newPayments(ctx context.Context, env *Env, a Approach) (Workload, error) {
	w := &payments{env: env, approach: a, start: time.Now(),
		fence: fencedlock.Fence{Table: "payment_fences", Key: "payment_key"}}
	var records idempotency.FencedStore
	if env.Memory() {
		if a == Raw {
			return nil, errSkip
		}
		m, err := idempotency.NewMemory(nil)
		if err != nil {
			return nil, err
		}
		w.exec, records = m, m
	} else {
		if _, err := env.Admin.Exec(ctx, paymentsDDL); err != nil {
			return nil, err
		}
		p, err := idempotency.NewPostgres(env.DB, nil)
		if err != nil {
			return nil, err
		}
		w.exec, records = p, p
	}
	if a == FencedLock {
		// Renewals are off: the pause models a stalled process, whose
		// keepalive stalls with it, so the lease does expire and another
		// client takes the key over. Only the tokens keep the stale
		// holder's charge out.
		f, err := idempotency.NewFenced(env.Locks, records, &idempotency.FencedConfig{
			LockerConfig: fencedlock.LockerConfig{
				TTL:       env.LeaseTTL,
				Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true},
			},
		})
		if err != nil {
			return nil, err
		}
		w.exec = f
	}
	return w, nil
}

// pick returns a payment key of the current round and its state.
func (w *payments) pick(rnd *rand.Rand) (string, *payment) {
	round := int(time.Since(w.start) / paymentRound)
	k := rnd.IntN(w.env.Keys)
	key := "pay-" + strconv.Itoa(round) + "-" + strconv.Itoa(k)
	if p, ok := w.keys.Load(key); ok {
		return key, p.(*payment)
	}
	p, _ := w.keys.LoadOrStore(key, &payment{amount: 100 + int64(k)})
	return key, p.(*payment)
}

func (w *payments) Op(ctx context.Context, client int, rnd *rand.Rand) Outcome {
	key, p := w.pick(rnd)
	by := "client-" + strconv.Itoa(client) + "-" + strconv.FormatInt(w.seq.Add(1), 10)
	var out Outcome
	switch w.approach {
	case Raw:
		w.env.Pause(ctx, rnd) // no gap to pause in: the claim and the charge are one transaction
		out = writeOutcome(w.raw(ctx, key, p, by))
	case NaiveLock:
		out = lockedOp(ctx, w.env, rnd, "payments/"+key, func(ctx context.Context, _ fencedlock.Lease) (Outcome, error) {
			return w.naive(ctx, rnd, key, p, by)
		})
	default:
		fp := idempotency.NewFingerprint([]byte(key), []byte(strconv.FormatInt(p.amount, 10)))
		fn := func(ctx context.Context) (idempotency.Result, error) {
			if w.approach == FencedLock {
				return w.fenced(ctx, rnd, key, p, by)
			}
			return w.charge(ctx, rnd, key, p, by)
		}
		// A client retries a payment in flight elsewhere, as the naive lock
		// waits for its lock: transactional mode waits on the claim by
		// itself (Config.InFlightWait), the fenced twin answers at once.
		deadline := time.Now().Add(inFlightPatience)
		delay := 500 * time.Microsecond
		var err error
		for {
			_, err = w.exec.Do(ctx, idempotency.Key{ID: key}, fp, fn)
			if !errors.Is(err, idempotency.ErrInFlight) || time.Now().After(deadline) {
				break
			}
			out.Retries++
			if !sleepCtx(ctx, delay/2+rand.N(delay/2+1)) {
				break
			}
			delay = min(2*delay, 20*time.Millisecond)
		}
		switch {
		case errors.Is(err, idempotency.ErrInFlight), errors.Is(err, fencedlock.ErrFenced):
			out.Rejected = true
		default:
			retries := out.Retries
			out = writeOutcome(err)
			out.Retries = retries
		}
	}
	switch {
	case out.Uncertain:
		p.unsure.Add(1)
	case out.Err == nil && !out.Rejected:
		p.acked.Store(true) // charged now, or found charged (a replay)
	}
	return out
}

// charge is the alternative's work: the charge, in the transaction that
// holds the claim.
func (w *payments) charge(ctx context.Context, rnd *rand.Rand, key string, p *payment, by string) (idempotency.Result, error) {
	w.env.Pause(ctx, rnd)
	if w.env.Memory() {
		p.charges.Add(1)
	} else {
		tx, ok := idempotency.TxFrom(ctx)
		if !ok {
			return idempotency.Result{}, errors.New("payments: no transaction in the context")
		}
		if _, err := tx.Exec(ctx, `INSERT INTO charges (payment_key, amount, charged_by) VALUES ($1, $2, $3)`, key, p.amount, by); err != nil {
			return idempotency.Result{}, err
		}
	}
	return idempotency.Result{Status: 201, Body: []byte(by)}, nil
}

// fenced is the fenced twin's work: a fenced read of the payment's fence row
// raises its token (so no older holder can charge after this point), then
// the charge goes with a fenced write. A stalled holder wakes with a stale
// token and its charge is refused.
func (w *payments) fenced(ctx context.Context, rnd *rand.Rand, key string, p *payment, by string) (idempotency.Result, error) {
	a, ok := idempotency.AttemptFrom(ctx)
	if !ok {
		return idempotency.Result{}, errors.New("payments: no attempt in the context")
	}
	token := a.Token()
	var charged bool
	if w.env.Memory() {
		if err := p.gate.Do(token, func() error { charged = p.charged; return nil }); err != nil {
			return idempotency.Result{}, err
		}
	} else {
		if _, err := w.env.DB.Exec(ctx, `INSERT INTO payment_fences (payment_key) VALUES ($1) ON CONFLICT DO NOTHING`, key); err != nil {
			return idempotency.Result{}, err
		}
		if err := w.fence.Read(ctx, w.env.DB, key, token, "charged", &charged); err != nil {
			return idempotency.Result{}, err
		}
	}
	if charged {
		// An earlier holder charged and did not record: the charge stands.
		return idempotency.Result{Status: 200, Body: []byte("charged earlier")}, nil
	}
	// A stalled process neither notices that its lease's context was
	// cancelled meanwhile (the keepalive's early warning) nor holds back the
	// write it was about to send: only the token can stop it.
	wctx := context.WithoutCancel(ctx)
	w.env.Pause(wctx, rnd)
	if w.env.Memory() {
		err := p.gate.Do(token, func() error {
			p.charged = true
			p.charges.Add(1)
			return nil
		})
		return idempotency.Result{Status: 201, Body: []byte(by)}, err
	}
	err := pgx.BeginFunc(wctx, w.env.DB, func(tx pgx.Tx) error {
		if err := w.fence.Update(wctx, tx, key, token, "charged = true"); err != nil {
			return err
		}
		_, err := tx.Exec(wctx, `INSERT INTO charges (payment_key, amount, charged_by) VALUES ($1, $2, $3)`, key, p.amount, by)
		return err
	})
	return idempotency.Result{Status: 201, Body: []byte(by)}, err
}

// naive is the naive lock's critical section: check, (pause), charge,
// record, all unfenced.
func (w *payments) naive(ctx context.Context, rnd *rand.Rand, key string, p *payment, by string) (Outcome, error) {
	if w.env.Memory() {
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		if done {
			return Outcome{}, nil
		}
		w.env.Pause(ctx, rnd)
		p.charges.Add(1)
		p.mu.Lock()
		p.done = true
		p.mu.Unlock()
		return Outcome{}, nil
	}
	var n int
	if err := w.env.DB.QueryRow(ctx, `SELECT count(*) FROM payments_done WHERE payment_key = $1`, key).Scan(&n); err != nil {
		return Outcome{}, err
	}
	if n > 0 {
		return Outcome{}, nil // a replay
	}
	w.env.Pause(ctx, rnd)
	if _, err := w.env.DB.Exec(ctx, `INSERT INTO charges (payment_key, amount, charged_by) VALUES ($1, $2, $3)`, key, p.amount, by); err != nil {
		return writeOutcome(err), nil
	}
	_, err := w.env.DB.Exec(ctx, `INSERT INTO payments_done (payment_key, charge) VALUES ($1, $2) ON CONFLICT DO NOTHING`, key, by)
	if err != nil {
		// The charge stands; the client is not told.
		return Outcome{Err: err, Uncertain: true}, nil
	}
	return Outcome{}, nil
}

// raw is the bare baseline that still charges once: the charge and the
// done-marker in one transaction, rolled back when the marker existed (a
// concurrent duplicate waits on the marker's unique index).
func (w *payments) raw(ctx context.Context, key string, p *payment, by string) error {
	tx, err := w.env.DB.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `INSERT INTO charges (payment_key, amount, charged_by) VALUES ($1, $2, $3)`, key, p.amount, by); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO payments_done (payment_key, charge) VALUES ($1, $2) ON CONFLICT DO NOTHING`, key, by)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return nil // charged already: the deferred rollback undoes this charge
	}
	return tx.Commit(ctx)
}

func (w *payments) Check(ctx context.Context) (int64, string, error) {
	counts := map[string]int64{}
	if w.env.Memory() {
		w.keys.Range(func(k, v any) bool {
			counts[k.(string)] = v.(*payment).charges.Load()
			return true
		})
	} else {
		rows, err := w.env.Admin.Query(ctx, `SELECT payment_key, count(*) FROM charges GROUP BY payment_key`)
		if err != nil {
			return 0, "", err
		}
		for rows.Next() {
			var k string
			var n int64
			if err := rows.Scan(&k, &n); err != nil {
				return 0, "", err
			}
			counts[k] = n
		}
		if err := rows.Err(); err != nil {
			return 0, "", err
		}
	}
	var doubled, extra, lost, unknown int64
	var examples []string
	for k, n := range counts {
		if n > 1 {
			doubled++
			extra += n - 1
			if len(examples) < 3 {
				examples = append(examples, fmt.Sprintf("%s×%d", k, n))
			}
		}
		if _, ok := w.keys.Load(k); !ok {
			unknown++
		}
	}
	w.keys.Range(func(k, v any) bool {
		p := v.(*payment)
		if p.acked.Load() && counts[k.(string)] == 0 {
			lost++ // a client was told it was charged
		}
		return true
	})
	v := extra + lost + unknown
	if v == 0 {
		return 0, "", nil
	}
	sort.Strings(examples)
	return v, fmt.Sprintf("%d keys charged more than once (%d extra charges, e.g. %v), %d acknowledged charges missing, %d charges of unknown keys",
		doubled, extra, examples, lost, unknown), nil
}
