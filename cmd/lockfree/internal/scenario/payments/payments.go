package payments

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// The payments tables. charges has no unique constraint, so that a double
// charge reaches the check; charged_by is the ID of the operation that
// charged. payments_done is the naive lock's and the bare baseline's record
// of charged keys, with the amount charged; payment_fences the fenced
// twin's token (and charged flag and amount) per key.
const (
	sqlPaymentsTables = `CREATE TABLE charges (
	payment_key text   NOT NULL,
	amount      bigint NOT NULL,
	charged_by  text   NOT NULL
);
CREATE TABLE payments_done (
	payment_key text   PRIMARY KEY,
	charge      text   NOT NULL,
	amount      bigint NOT NULL
);
CREATE TABLE payment_fences (
	payment_key   text    PRIMARY KEY,
	charged       boolean NOT NULL DEFAULT false,
	amount        bigint  NOT NULL DEFAULT 0,
	fencing_token bigint  NOT NULL DEFAULT 0
)`
	sqlPaymentsCharge  = `INSERT INTO charges (payment_key, amount, charged_by) VALUES ($1, $2, $3)`
	sqlPaymentsCharges = `SELECT payment_key, charged_by FROM charges`
)

// payments is the scenario of payments that clients charge, each key many
// times (the retries of one payment), and now and then with another amount
// (another request that reuses the key, which must be refused): the charges
// found after the run are held to ExactlyOnce — each key charged once once
// a client was told so, never by a refused attempt, and no client of
// another amount than the charge's told it is charged.
type payments struct{}

func init() { engine.Register(payments{}) }

// paymentScenarios are the scenarios whose lock-based and raw approaches
// are payments': payments-leased differs in its alternative only.
var paymentScenarios = []string{"payments", "payments-leased"}

func (payments) Name() string { return "payments" }
func (payments) Order() int   { return 3 }
func (payments) Description() string {
	return "clients charge the payment keys of the current round (each key many times: the retries of one payment; one attempt in 8 reuses the key with another amount, which must be refused); each key is charged exactly once, only by an attempt that was not refused, and no attempt of another amount is told it is charged"
}

// Harm is what a violation of the scenario is, in its verdicts' words.
func (payments) Harm() engine.Harm {
	return engine.Harm{One: "payment", Many: "payments", Bad: "got %s wrong (charged twice, not at all, or answered for another request)", None: "got none wrong"}
}

// CostRuns: a payment's keys are new every 50 ms round. At 1 key most
// charges are replays of a key charged already (the faults need them: a
// taker retries the stopped holder's key); at 1000 keys first executions
// dominate. Both cost runs, named so.
func (payments) CostRuns() []engine.CostRun {
	return []engine.CostRun{
		{Keys: 1, What: "replay-heavy: see the first executions and replays columns"},
		{Keys: 1000, What: "first executions dominate"},
	}
}
func (payments) Migrations() []migrate.Migration { return idempotency.Migrations() }

// Kind tells a charge that ran (it stored the key's answer, or charged in
// an approach that keeps no answer) from a replay or a reuse refused: the
// report shows how many of each, so that a reader sees which path a
// throughput measures.
func (payments) Kind(op *history.Op) string {
	var out ChargeOutput
	if json.Unmarshal(op.Output, &out) != nil {
		return ""
	}
	if out.Recorded {
		return "first_executions"
	}
	return "replays"
}

func (payments) Setup(ctx context.Context, db *pgxpool.Pool, _ engine.Sizes) error {
	_, err := db.Exec(ctx, sqlPaymentsTables)
	return err
}

func (payments) Check(ctx context.Context, db *pgxpool.Pool, ops []history.Op, _ engine.Sizes) (*history.Findings, error) {
	rows, err := db.Query(ctx, sqlPaymentsCharges)
	if err != nil {
		return nil, err
	}
	var effects []history.Effect
	var e history.Effect
	if _, err := pgx.ForEachRow(rows, []any{&e.Key, &e.By}, func() error {
		effects = append(effects, e)
		return nil
	}); err != nil {
		return nil, err
	}
	rep, err := ExactlyOnce(ops, effects)
	if err != nil {
		return nil, err
	}
	checkAnswered(rep, ops)
	checkExpired(rep, ops)
	return rep, nil
}

// unanswered is the violation of an operation given a replay that carried
// no answer; releasedAnswered of one whose key was released after its
// handler answered.
const (
	unanswered       history.Anomaly = "replay without an answer"
	releasedAnswered history.Anomaly = "key released after its answer"
	expiredReplay    history.Anomaly = "replay after expiry"
)

// metaRetention marks an operation on a key that expires: the store's
// retention of its answer (a time.Duration's string).
const metaRetention = "retention"

// checkExpired adds to rep a violation for each operation on a key that
// expires (metaRetention) told the key is charged by a replay (OK, not
// Recorded) when it was called more than the retention after an operation
// that stored the key's answer had returned: the answer had expired
// before the operation sent anything, and each of its sends must have
// been refused (idempotency.ErrExpired), purged or not.
func checkExpired(rep *history.Findings, ops []history.Op) {
	type replay struct {
		op        history.Op
		retention time.Duration
	}
	var replays []replay
	stored := map[string]history.Time{} // each key's first return of an operation that stored its answer
	for _, op := range ops {
		retention, err := time.ParseDuration(op.Meta[metaRetention])
		var out ChargeOutput
		switch {
		case err != nil || op.Outcome != history.OK || json.Unmarshal(op.Output, &out) != nil:
		case !out.Recorded:
			replays = append(replays, replay{op, retention})
		default:
			if t, ok := stored[op.Key]; !ok || op.Return < t {
				stored[op.Key] = op.Return
			}
		}
	}
	for _, r := range replays {
		op := r.op
		t, ok := stored[op.Key]
		if !ok || op.Call <= t+history.Time(r.retention) {
			continue
		}
		rep.Add(history.Violation{Key: op.Key, Anomaly: expiredReplay, Marks: []history.Mark{{Op: op, Role: history.Culprit}},
			Text: fmt.Sprintf("client %d's charge called at t=%.3fs was told key %s is charged by a replay, %.3fs after an operation that stored its answer returned: past the key's retention (%v), it must be refused",
				op.Client, float64(op.Call-rep.Base)/1e9, short.Quote(op.Key), float64(op.Call-t)/1e9, r.retention)})
	}
}

// checkAnswered adds to rep a violation for each operation given a replay
// with no answer (metaUnanswered): the key had expired and been purged to
// a tombstone, whose retry must be refused (idempotency.ErrExpired), not
// answered as if charged just now; and for each whose key was released
// after its handler answered (metaReleasedAnswered), so that a retry ran
// it again.
func checkAnswered(rep *history.Findings, ops []history.Op) {
	for _, op := range ops {
		at := fmt.Sprintf("client %d's charge called at t=%.3fs", op.Client, float64(op.Call-rep.Base)/1e9)
		if op.Meta[metaUnanswered] != "" {
			rep.Add(history.Violation{Key: op.Key, Anomaly: unanswered, Marks: []history.Mark{{Op: op, Role: history.Culprit}},
				Text: fmt.Sprintf("%s was given a replay of key %s that carried no answer: the key had expired, and the retry was not refused", at, short.Quote(op.Key))})
		}
		if op.Meta[metaReleasedAnswered] != "" {
			rep.Add(history.Violation{Key: op.Key, Anomaly: releasedAnswered, Marks: []history.Mark{{Op: op, Role: history.Culprit}},
				Text: fmt.Sprintf("%s: the handler answered, and key %s was released instead of spent: a retry runs the charge again", at, short.Quote(op.Key))})
		}
	}
}

// A payment key is charged by its first attempt and retried by later ones:
// each round of paymentRound brings Keys new keys, and each attempt picks a
// key of one of the last paymentRounds(env) rounds at random (paymentKeys),
// so that first executions come often and a key is still retried by the
// others long after a stopped holder's lease ran out. Every worker derives the round from the
// history clock, one clock for the machine, so they all retry the same keys.
// Only a first execution reaches the alternative's before-write point: with
// 100 ms rounds an armed worker of eight reached one about once a second,
// and a short run under load sometimes ended before it did (no pause
// injected); 50 ms rounds double that, and a key is still retried a few
// times a second.
const paymentRound = 50 * time.Millisecond

// paymentRounds is how many rounds' keys are retried: those of the last two
// leases and two seconds.
func paymentRounds(env *engine.Env) int64 {
	return int64((2*env.LeaseTTL + 2*time.Second) / paymentRound)
}

// paymentKeys picks a client's payment keys. It never picks a key of a
// round before the client's first operation: at the start of a run every
// key of the last paymentRounds is new, and a first execution on one of
// the oldest, stopped by a fault, would be retried by nobody once the
// round fell out of the window — no takeover, and the fault shows nothing.
// The zero value is ready to use.
type paymentKeys struct {
	since int64 // the round of the client's first operation; 0 before it
}

// next starts a client's next charge: a key of a recent round, and its
// amount — one time in reuseOdds another amount than the key's own, a
// client reusing the key for another request. Whichever request of a key
// comes first is charged; every request of the other amount must then be
// refused (idempotency.ErrKeyReused).
func (p *paymentKeys) next(ctx context.Context, env *engine.Env) (context.Context, *engine.Invocation, int64, error) {
	now := int64(history.Now()) / int64(paymentRound)
	if p.since == 0 {
		p.since = now
	}
	round := now - env.Rand.Int64N(min(paymentRounds(env), now-p.since+1))
	k := env.Rand.IntN(env.Keys)
	key := paymentKey(round, k)
	amount := 100 + int64(k)
	if env.Rand.IntN(reuseOdds) == 0 {
		amount += 1000
	}
	if d := env.Directed(); d != "" {
		if dk, ok := parsePaymentKey(d); ok {
			// A taker retries the stopped worker's payment: its key,
			// its own amount.
			key, amount = d, 100+int64(dk)
		}
	}
	ctx, op, err := env.Invoke(ctx, key, KindCharge, ChargeInput{Amount: amount})
	return ctx, op, amount, err
}

// paymentKey is the key of payment k of round.
func paymentKey(round int64, k int) string {
	return "pay-" + strconv.FormatInt(round, 10) + "-" + strconv.Itoa(k)
}

// parsePaymentKey returns the number of the payment of key, a paymentKey.
func parsePaymentKey(key string) (k int, ok bool) {
	rest, ok := strings.CutPrefix(key, "pay-")
	if !ok {
		return 0, false
	}
	round, num, ok := strings.Cut(rest, "-")
	if _, err := strconv.ParseInt(round, 10, 64); !ok || err != nil {
		return 0, false
	}
	k, err := strconv.Atoi(num)
	return k, err == nil && k >= 0
}

// reuseOdds is one in how many charges reuses its key with another amount.
const reuseOdds = 8

// errKeyReused is the refusal of a request whose key was charged for
// another amount, by the approaches that keep no idempotency record: the
// same error idempotency returns.
func errKeyReused(key string, charged int64) error {
	return fmt.Errorf("%w: %s was charged %d", idempotency.ErrKeyReused, key, charged)
}

// paymentFingerprint is the request of a payment: its key and amount.
func paymentFingerprint(key string, amount int64) idempotency.Fingerprint {
	return idempotency.NewFingerprint([]byte(key), []byte(strconv.FormatInt(amount, 10)))
}

// inFlightPatience is how long a client retries a payment another client is
// executing, as the lock-based clients wait for the lock.
const inFlightPatience = 2 * time.Second

// retryInFlight calls do until it returns something else than a key in
// flight elsewhere, for at most inFlightPatience, and counts the retries.
func retryInFlight(ctx context.Context, op *engine.Invocation, do func() error) error {
	deadline := time.Now().Add(inFlightPatience)
	delay := 500 * time.Microsecond
	retries := 0
	defer func() { op.Set("retries", strconv.Itoa(retries)) }()
	for {
		err := do()
		if !isInFlight(err) || time.Now().After(deadline) {
			return err
		}
		retries++
		if !engine.Sleep(ctx, delay/2+rand.N(delay/2+1)) {
			return err
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
}
