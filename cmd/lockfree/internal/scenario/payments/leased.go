package payments

import (
	"context"
	"hash/fnv"
	"net/http"
	"strconv"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/idempotency"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// paymentsLeased is payments with the charge outside the claim's
// transaction — a call to a payment provider, here a charge written in its
// own transaction — so its alternative is idempotency's leased mode: the
// key is claimed with a lease and a fencing token, the charge presents the
// attempt's token to the provider (a fenced write, as the fenced twin's),
// and the result is stored with a compare-and-set on the token. An attempt
// stopped past its lease is superseded: its charge is refused by the
// token, and its completion or release by the record; the faults fall
// before its charge or between its charge and its completion, in turn
// (chargePoint: each shows a stale attempt's other write). One key in expiringOdds of the alternative expires while
// it is still retried: a retry after the key's retention is refused. The tables, the check and the
// other approaches are payments'.
type paymentsLeased struct{ payments }

func init() { engine.Register(paymentsLeased{}) }

func (paymentsLeased) Name() string { return "payments-leased" }
func (paymentsLeased) Description() string {
	return "payments whose charge is an external call (its own transaction, fenced by the attempt's token), the alternative idempotency's leased mode, one key in 4 expiring while clients still retry it: each key is charged exactly once, only by an attempt that was not refused, no attempt of another amount is told it is charged, at most one stores the key's answer, no attempt is granted a key while another's lease on it is in force, and no retry is answered after the key's answer expired"
}

// OnRequest: the default run of lockfree compare leaves the scenario out.
func (paymentsLeased) OnRequest() string {
	return "payments runs the same workload, its alternative the transactional mode"
}

// paymentsLeasedAlternative charges over HTTP (leased_http.go), through
// idempotency.Middleware on idempotency.Leased: claim the key with a lease,
// fenced read of the key's charged flag with the attempt's token, charge
// with a fenced write, complete with the token.
type paymentsLeasedAlternative struct{}

func init() { engine.RegisterApproach(paymentsLeasedAlternative{}) }

func (paymentsLeasedAlternative) Scenario() string          { return "payments-leased" }
func (paymentsLeasedAlternative) Approach() engine.Approach { return engine.Alternative }
func (paymentsLeasedAlternative) Label() string {
	return "idempotency/client → idempotency.Middleware on idempotency.Leased: claim with a lease → fenced read with the attempt's token → charge with a fenced write → complete with the token"
}
func (paymentsLeasedAlternative) Protection(p engine.Params) engine.Protection {
	return engine.LockTTL(p)
}

// One key in expiringOdds of the leased alternative expires: its store
// keeps the key's answer for paymentsRetention, a quarter of the time a
// key is retried (paymentRounds), so that most of the key's retries come
// after its answer expired and must be refused (idempotency.ErrExpired),
// from early in a run on (a run of a few leases has such retries). The
// retention runs from the answer: a stopped attempt's key is still taken
// over. The other keys are kept for the store's default retention, longer
// than any run.
const expiringOdds = 4

func paymentsRetention(env *engine.Env) time.Duration { return (env.LeaseTTL + time.Second) / 2 }

// expiring reports whether key is one of the keys that expire: the same
// answer in every worker.
func expiring(key string) bool { return keyHash(key)%expiringOdds == 0 }

// keyHash is a payment key's hash: the same in every worker.
func keyHash(key string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return h.Sum32()
}

// A client purges the expired records every purgeEvery operations, up to
// purgeLimit of them: an expired key becomes a tombstone, its answer
// dropped, the key still spent.
const (
	purgeEvery = 16
	purgeLimit = 100
)

func (paymentsLeasedAlternative) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	c := &paymentsLeasedClient{env: env}
	for i, retention := range []time.Duration{0, paymentsRetention(env)} {
		store, err := idempotency.NewPostgres(env.DB, &idempotency.PostgresConfig{Retention: retention, MeterProvider: env.MeterProvider})
		if err != nil {
			return nil, err
		}
		l, err := idempotency.NewLeased(recordingLeases{LeaseStore: store, env: env}, &idempotency.LeasedConfig{TTL: env.LeaseTTL, MeterProvider: env.MeterProvider})
		if err != nil {
			return nil, err
		}
		c.stores[i] = store
		if c.http[i], err = newChargeClient(env, watchedLeased{l}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// paymentsLeasedClient charges a key through http[1] if it is one that
// expires, and http[0] otherwise: each its service, the charge handler
// behind idempotency.Middleware on a Leased of stores' store.
type paymentsLeasedClient struct {
	env    *engine.Env
	stores [2]*idempotency.Postgres
	http   [2]*http.Client
	keys   paymentKeys
	ops    int
	late   lateKey
}

// A client retries, every lateEvery operations, the last key that expires
// it was told is charged, once the key's retention has passed since: a
// client that retries a payment long after its answer, which must be
// refused (idempotency.ErrExpired), never replayed. Each such key is
// retried late once. It makes expired keys' retries come in every run,
// however few operations a loaded machine runs.
const lateEvery = 8

// lateKey is a key that expires, its amount, and when its charge returned.
type lateKey struct {
	key    string
	amount int64
	at     history.Time
}

// metaUnanswered marks an operation given a replay that carried no
// answer: a spent key's tombstone, replayed instead of refused.
const metaUnanswered = "unanswered"

func (c *paymentsLeasedClient) Op(ctx context.Context) error {
	if c.ops++; c.ops%purgeEvery == 0 {
		// Upkeep, no operation of the history: a purge that fails (the
		// server restarting) leaves the records for the next one.
		_, _ = c.stores[1].Purge(ctx, purgeLimit)
	}
	ctx, op, amount, err := c.next(ctx)
	if err != nil {
		return err
	}
	hc := c.http[0]
	if expiring(op.Key()) {
		hc = c.http[1]
		op.Set(metaRetention, paymentsRetention(c.env).String())
	}
	req, kind := hostileCharge(c.env.Rand.IntN(100), op.Key(), amount)
	if kind != "" {
		op.Set("hostile", kind)
	}
	call := &chargeCall{ctx: ctx, op: op, point: chargePoint(c.env, "harness.payments.leased.before-write", 1, 2, 3)}
	err = call.outcome(retryInFlight(ctx, op, func() error { return call.send(hc, req) }))
	if call.sends > 1 {
		op.Set("retries", strconv.Itoa(call.sends-1)) // the client's resends too
	}
	if err == nil && expiring(op.Key()) {
		c.late = lateKey{key: op.Key(), amount: amount, at: history.Now()}
	}
	// A superseded attempt is refused: its charge too, by the token, unless
	// it committed before (Took), and then the operation is uncertain.
	return op.Finish(ChargeOutput{Recorded: err == nil && call.stored}, err,
		idempotency.ErrInFlight, idempotency.ErrKeyReused, idempotency.ErrExpired, errChargeTooLarge)
}

// next starts the client's next charge: every lateEvery operations the
// late retry of c.late, when its key's retention has passed; otherwise
// the next of c.keys.
func (c *paymentsLeasedClient) next(ctx context.Context) (context.Context, *engine.Invocation, int64, error) {
	l := c.late
	if c.ops%lateEvery != 0 || l.key == "" || history.Now() <= l.at+history.Time(paymentsRetention(c.env)) {
		return c.keys.next(ctx, c.env)
	}
	c.late = lateKey{}
	ctx, op, err := c.env.Invoke(ctx, l.key, KindCharge, ChargeInput{Amount: l.amount})
	if err == nil {
		op.Set("late-retry", "yes") // a meta of its own: hostileCharge may draw a kind too
	}
	return ctx, op, l.amount, err
}

func (c *paymentsLeasedClient) Close() error { return nil }

// recordingLeases is the leased alternative's store of attempts, each lease
// it grants, renews and ends (by a completion or a release) reported as
// Env.Locks' are (recordingLocks), named by the key: the attempts' tenures
// are held to the exclusivity check — no attempt granted a key while
// another's lease on it is in force, none completing or releasing a key
// after another was granted it — and a newer attempt's claim is the
// takeover the fault injector waits for. A request whose answer never came
// is reported as uncertain (engine.Uncertain), as Env.Locks' are.
type recordingLeases struct {
	idempotency.LeaseStore
	env *engine.Env
}

func (r recordingLeases) Claim(ctx context.Context, key idempotency.Key, fp idempotency.Fingerprint, ttl time.Duration) (idempotency.Lease, *idempotency.Result, error) {
	r.env.Claiming(ctx) // the late-renewal fault may keep the key from it
	sent := history.Now()
	l, res, err := r.LeaseStore.Claim(ctx, key, fp, ttl)
	switch {
	case err == nil && res == nil:
		r.report(ctx, engine.Granted, l, sent, nil)
	case err != nil:
		r.report(ctx, engine.Granted, idempotency.Lease{Key: key, TTL: ttl}, sent, err)
	}
	return l, res, err
}

// Renew goes through engine.Renewal: the late-renewal fault may hold it
// past the lease's expiry, and the store must refuse it then.
func (r recordingLeases) Renew(ctx context.Context, l idempotency.Lease) (idempotency.Lease, error) {
	return engine.Renewal(ctx, r.env, leaseName(l), l.Token, func(ctx context.Context, sent history.Time) (idempotency.Lease, error) {
		renewed, err := r.LeaseStore.Renew(ctx, l)
		if err != nil {
			renewed = l
		}
		r.report(ctx, engine.Renewed, renewed, sent, err)
		return renewed, err
	})
}

func (r recordingLeases) Complete(ctx context.Context, l idempotency.Lease, res idempotency.Result) error {
	sent := history.Now()
	err := r.LeaseStore.Complete(ctx, l, res)
	r.report(ctx, engine.Released, l, sent, err)
	return err
}

func (r recordingLeases) Release(ctx context.Context, l idempotency.Lease) error {
	if call, ok := ctx.Value(chargeCallKey{}).(*chargeCall); ok && call.answered != 0 && call.answered == l.Token {
		call.op.Set(metaReleasedAnswered, "true")
	}
	sent := history.Now()
	err := r.LeaseStore.Release(ctx, l)
	r.report(ctx, engine.Released, l, sent, err)
	return err
}

// report reports ev of lease l, whose request was sent at sent and
// answered with err: as made when err is nil, as uncertain when its answer
// never came, not at all when it was refused.
func (r recordingLeases) report(ctx context.Context, kind engine.EvidenceKind, l idempotency.Lease, sent history.Time, err error) {
	uncertain := engine.Uncertain(err, idempotency.ErrInFlight, idempotency.ErrKeyReused, idempotency.ErrExpired,
		idempotency.ErrSuperseded, idempotency.ErrLeaseLost, idempotency.ErrInvalid)
	if err != nil && !uncertain {
		return
	}
	r.env.Report(ctx, engine.Evidence{Kind: kind, Sent: sent, Name: leaseName(l), Token: l.Token, TTL: l.TTL, Uncertain: uncertain})
}

// leaseName names an attempt's lease in the evidence: by its key.
func leaseName(l idempotency.Lease) string { return "idempotency/" + l.Key.ID }
