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

// paymentRound is how long a set of repeated payment keys lives: each round,
// repeats pick among Keys keys of the round, so a repeat may meet an
// execution of its key in flight (and, under the pause fault, take it over).
const paymentRound = time.Second

// inFlightPatience is how long a client retries a payment that another
// client is executing (the default InFlightWait).
const inFlightPatience = 2 * time.Second

// paymentsDDL: charges has no unique constraint, so that the checker sees a
// double charge; payments_done is raw's record of charged keys;
// payment_fences is the payment's resource-side token and charged flag,
// which the lock twins read and write.
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

// The statements of the payments' approaches.
const (
	sqlCharge = `INSERT INTO charges (payment_key, amount, charged_by) VALUES ($1, $2, $3)`
	// sqlPaymentRead is the lock twins' fenced read of the payment: it
	// creates the payment's row if needed, raises its token and returns
	// the row, in one statement; a stale token gets no row.
	sqlPaymentRead = `INSERT INTO payment_fences AS f (payment_key, fencing_token) VALUES ($1, $2)
		ON CONFLICT (payment_key) DO UPDATE SET fencing_token = EXCLUDED.fencing_token
		WHERE f.fencing_token <= EXCLUDED.fencing_token
		RETURNING charged`
	// sqlPaymentCharge is the lock twins' fenced write: the charged flag
	// (under the token condition) and the charge, in one statement.
	sqlPaymentCharge = `WITH f AS (
			UPDATE payment_fences SET charged = true, fencing_token = $4
			WHERE payment_key = $1 AND fencing_token <= $4
			RETURNING 1)
		INSERT INTO charges (payment_key, amount, charged_by) SELECT $1, $2, $3 FROM f`
	// sqlRawCharge is raw: the done-marker and the charge, in one
	// autocommit statement; a charged key inserts neither.
	sqlRawCharge = `WITH done AS (
			INSERT INTO payments_done (payment_key, charge) VALUES ($1, $3)
			ON CONFLICT DO NOTHING
			RETURNING 1)
		INSERT INTO charges (payment_key, amount, charged_by) SELECT $1, $2, $3 FROM done`
)

func init() {
	labels := map[Approach]string{
		Alternative: "idempotency.Do: BEGIN + claim in one batch → INSERT charge in the claim's tx → record + COMMIT in one batch (3 round trips; a replay 2)",
		FencedLock:  "idempotency.Fenced: acquire → fenced read of the record → fenced read of the payment → charge + flag in one fenced statement → fenced put of the result → release (6; a replay 3)",
		NaiveLock:   "fenced-lock's lock and statements, every write presenting one constant token: no fence (6; a replay 3)",
		Raw:         "one autocommit statement: INSERT done-marker ON CONFLICT DO NOTHING → INSERT charge from it (1; no stored answer)",
	}
	register(Scenario{
		Name: "payments",
		Description: "clients charge payments, 9 in 10 a new payment and 1 in 10 a repeat of a payment of the round " +
			"(a retry, possibly of a payment in flight); each payment is charged exactly once",
		Approaches: []Approach{Alternative, FencedLock, NaiveLock, Raw},
		Labels:     labels,
		Migrations: idempotency.Migrations(),
		New: func(ctx context.Context, env *Env, a Approach) (Workload, error) {
			return newPayments(ctx, env, a, 0.1)
		},
	})
	register(Scenario{
		Name: "payments-replay",
		Description: "payments where every operation repeats one of the round's payments: mostly replays, " +
			"so the ratio measures the replay path",
		Approaches: []Approach{Alternative, FencedLock, NaiveLock, Raw},
		Labels:     labels,
		Migrations: idempotency.Migrations(),
		New:        func(ctx context.Context, env *Env, a Approach) (Workload, error) { return newPayments(ctx, env, a, 1) },
	})
}

// payment is what the workload knows of one key.
type payment struct {
	amount int64
	acked  atomic.Bool  // some client was told the key is charged
	unsure atomic.Int64 // operations whose fate is unknown
	// memory backends
	charges atomic.Int64
	gate    fencedlock.Gate // the lock twins: the payment's token…
	charged bool            // …and what it guards (accessed under gate)
}

type payments struct {
	env      *Env
	approach Approach
	repeats  float64 // the share of operations that repeat a payment of the round
	start    time.Time
	keys     sync.Map // string → *payment
	exec     idempotency.Executor
	seq      atomic.Int64
	// what the operations did: charged, or answered without charging
	firsts, replays atomic.Int64
}

func newPayments(ctx context.Context, env *Env, a Approach, repeats float64) (Workload, error) {
	w := &payments{env: env, approach: a, repeats: repeats, start: time.Now()}
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
	if a == NaiveLock {
		records = unfencedRecords{records}
	}
	if a == FencedLock || a == NaiveLock {
		// Renewals are off: the pause models a stalled process, whose
		// keepalive stalls with it, so the lease does expire and another
		// client takes the key over. Only the tokens keep the stale
		// holder's charge out.
		f, err := idempotency.NewFenced(env.Locks, records, &idempotency.FencedConfig{
			LockerConfig: fencedlock.LockerConfig{
				TTL:       env.LeaseTTL,
				Keepalive: &fencedlock.KeepaliveConfig{NoRenew: true},
				Wait:      &fencedlock.WaitConfig{MinDelay: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond, Wakeups: wakeups(env.Locks)},
			},
		})
		if err != nil {
			return nil, err
		}
		w.exec = f
	}
	return w, nil
}

// unfencedToken is the one token the naive twin presents: every write is
// admitted, as a write under a lock without a fence is.
const unfencedToken = 1

// unfencedRecords is the naive twin's record store: the fenced twin's
// statements, each presenting unfencedToken.
type unfencedRecords struct{ idempotency.FencedStore }

func (u unfencedRecords) ReadFenced(ctx context.Context, key idempotency.Key, fp idempotency.Fingerprint, _ int64) (idempotency.Record, error) {
	return u.FencedStore.ReadFenced(ctx, key, fp, unfencedToken)
}

func (u unfencedRecords) PutFenced(ctx context.Context, key idempotency.Key, fp idempotency.Fingerprint, _ int64, r idempotency.Result) error {
	return u.FencedStore.PutFenced(ctx, key, fp, unfencedToken, r)
}

func (u unfencedRecords) DropFenced(ctx context.Context, key idempotency.Key, _ int64) error {
	return u.FencedStore.DropFenced(ctx, key, unfencedToken)
}

// pick returns a payment key and its state: a new payment, or a repeat of
// one of the round's Keys payments.
func (w *payments) pick(rnd *rand.Rand) (string, *payment) {
	var key string
	k := rnd.IntN(w.env.Keys)
	if rnd.Float64() < w.repeats {
		round := int(time.Since(w.start) / paymentRound)
		key = "pay-" + strconv.Itoa(round) + "-" + strconv.Itoa(k)
	} else {
		key = "new-" + strconv.FormatInt(w.seq.Add(1), 10)
	}
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
	if w.approach == Raw {
		w.env.Pause(ctx, rnd) // no gap to pause in: the check and the charge are one statement
		out = writeOutcome(w.raw(ctx, key, p, by))
	} else {
		out = w.do(ctx, rnd, key, p, by)
	}
	switch {
	case out.Uncertain:
		p.unsure.Add(1)
	case out.Err == nil && !out.Rejected:
		p.acked.Store(true) // charged now, or found charged (a replay)
	}
	return out
}

// do runs one payment through the workload's executor, retrying while
// another client executes the payment, as a client would.
func (w *payments) do(ctx context.Context, rnd *rand.Rand, key string, p *payment, by string) Outcome {
	var out Outcome
	fp := idempotency.NewFingerprint([]byte(key), []byte(strconv.FormatInt(p.amount, 10)))
	fn := func(ctx context.Context) (idempotency.Result, error) {
		if w.approach == Alternative {
			return w.charge(ctx, rnd, key, p, by)
		}
		return w.locked(ctx, rnd, key, p, by)
	}
	deadline := time.Now().Add(inFlightPatience)
	delay := 500 * time.Microsecond
	var err error
	for {
		var res idempotency.Result
		res, err = w.exec.Do(ctx, idempotency.Key{ID: key}, fp, fn)
		if err == nil && res.Replayed {
			w.replays.Add(1)
		}
		if !errors.Is(err, idempotency.ErrInFlight) || time.Now().After(deadline) {
			break
		}
		out.Retries++
		if !sleepCtx(ctx, delay/2+rand.N(delay/2+1)) {
			break
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
	if errors.Is(err, idempotency.ErrInFlight) || errors.Is(err, fencedlock.ErrFenced) {
		out.Rejected = true
		return out
	}
	retries := out.Retries
	out = writeOutcome(err)
	out.Retries = retries
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
		if _, err := tx.Exec(ctx, sqlCharge, key, p.amount, by); err != nil {
			return idempotency.Result{}, err
		}
	}
	w.firsts.Add(1)
	return idempotency.Result{Status: 201, Body: []byte(by)}, nil
}

// locked is the lock twins' work: a fenced read of the payment raises its
// token (so no older holder can charge after this point), then the charge
// goes with a fenced write. A stalled holder wakes with a stale token and
// its charge is refused. The naive twin runs the same statements with
// unfencedToken, which every write presents.
func (w *payments) locked(ctx context.Context, rnd *rand.Rand, key string, p *payment, by string) (idempotency.Result, error) {
	a, ok := idempotency.AttemptFrom(ctx)
	if !ok {
		return idempotency.Result{}, errors.New("payments: no attempt in the context")
	}
	token := a.Token()
	if w.approach == NaiveLock {
		token = unfencedToken
	}
	charged, err := w.readPayment(ctx, key, p, token)
	if err != nil {
		return idempotency.Result{}, err
	}
	if charged {
		// An earlier holder charged and did not record: the charge stands.
		w.replays.Add(1)
		return idempotency.Result{Status: 200, Body: []byte("charged earlier")}, nil
	}
	// A stalled process neither notices that its lease's context was
	// cancelled meanwhile (the keepalive's early warning) nor holds back the
	// write it was about to send: only the token can stop it.
	wctx := context.WithoutCancel(ctx)
	w.env.Pause(wctx, rnd)
	if err := w.chargePayment(wctx, key, p, by, token); err != nil {
		return idempotency.Result{}, err
	}
	w.firsts.Add(1)
	return idempotency.Result{Status: 201, Body: []byte(by)}, nil
}

// readPayment is the fenced read of the payment's charged flag.
func (w *payments) readPayment(ctx context.Context, key string, p *payment, token int64) (bool, error) {
	var charged bool
	if w.env.Memory() {
		err := p.gate.Do(token, func() error { charged = p.charged; return nil })
		return charged, err
	}
	err := w.env.DB.QueryRow(ctx, sqlPaymentRead, key, token).Scan(&charged)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, &fencedlock.FencedError{Presented: token}
	}
	return charged, err
}

// chargePayment is the fenced write: the charged flag and the charge.
func (w *payments) chargePayment(ctx context.Context, key string, p *payment, by string, token int64) error {
	if w.env.Memory() {
		return p.gate.Do(token, func() error {
			p.charged = true
			p.charges.Add(1)
			return nil
		})
	}
	tag, err := w.env.DB.Exec(ctx, sqlPaymentCharge, key, p.amount, by, token)
	if err == nil && tag.RowsAffected() == 0 {
		err = &fencedlock.FencedError{Presented: token}
	}
	return err
}

// raw is the bare baseline that still charges once: one statement inserts
// the done-marker and, only if it was new, the charge.
func (w *payments) raw(ctx context.Context, key string, p *payment, by string) error {
	tag, err := w.env.DB.Exec(ctx, sqlRawCharge, key, p.amount, by)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		w.replays.Add(1)
	} else {
		w.firsts.Add(1)
	}
	return nil
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
		return 0, w.shares(), nil
	}
	sort.Strings(examples)
	return v, fmt.Sprintf("%d keys charged more than once (%d extra charges, e.g. %v), %d acknowledged charges missing, %d charges of unknown keys; %s",
		doubled, extra, examples, lost, unknown, w.shares()), nil
}

// shares says what the operations did: the share that charged (first
// executions) and the share answered without charging (replays).
func (w *payments) shares() string {
	firsts, replays := w.firsts.Load(), w.replays.Load()
	total := max(firsts+replays, 1)
	return fmt.Sprintf("%d%% first executions (%d), %d%% replays (%d)",
		(100*firsts+total/2)/total, firsts, (100*replays+total/2)/total, replays)
}
