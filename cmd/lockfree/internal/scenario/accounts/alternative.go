package accounts

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/partition"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// sqlAccountsPartitioned is the single writer's append: the next number and
// its event in one statement, fenced by the epoch (Condition, from $5: the
// partition, owner and epoch) and by the number it read (so that a late
// write of an append whose fate was unknown changes nothing rather than
// duplicate). The event records the epoch presented and the partition's
// epoch as the statement found it (the membership tables' default names),
// for the check of stale owners: the number condition alone would hide a
// stale owner's write that happens to follow the right number.
const sqlAccountsPartitioned = `WITH u AS (
	UPDATE accounts SET last_seq = $2 WHERE id = $1 AND last_seq = $3 AND %s RETURNING id)
INSERT INTO account_events (account, seq, appended_by, epoch, owner_epoch)
SELECT id, $2, $4, $7, (SELECT epoch FROM lockfree_partition_owners WHERE partition = $5) FROM u`

// errStaleSeq is an append whose expected last number was not the table's:
// it changed nothing.
var errStaleSeq = errors.New("harness: accounts: last sequence number changed since it was read")

// accountsMembers is the membership schedule of the alternative's fleet of
// clients members: every worker is a member, and one that stops
// heartbeating leaves the live set after ttl. Up to 16 members: a 1 s lease,
// heartbeats and reads of the fleet every 100 ms, every 10 ms while
// partitions move. A larger fleet stretches all three by clients/16: 64
// members on two loaded cores, each heartbeating 10 times a second and
// reading the ring 100 times a second while they settle, kept missing
// their 1 s leases, and the fleet never settled.
func accountsMembers(clients int) (ttl, interval, move time.Duration) {
	s := time.Duration(max(1, clients/16))
	return s * time.Second, s * 100 * time.Millisecond, s * 10 * time.Millisecond
}

// accountsAlternative appends as the owner of the entity's partition: every
// worker is a partition.Member, appending to the entities of the partitions
// it owns on their serial executors, each write fenced by the partition's
// epoch. A member stopped past its lease loses its partitions to another;
// its write, presenting the old epoch, is refused.
type accountsAlternative struct{}

func init() { engine.RegisterApproach(accountsAlternative{}) }

func (accountsAlternative) Scenario() string          { return "accounts" }
func (accountsAlternative) Approach() engine.Approach { return engine.Alternative }
func (accountsAlternative) Label() string {
	return "partition.Member.Do: each worker a member; the owner's serial executor reads and writes the next number and the event, fenced by the epoch"
}
func (accountsAlternative) Protection(p engine.Params) engine.Protection {
	ttl, interval, _ := accountsMembers(p.Clients)
	return engine.Protection{Lease: ttl + interval, What: "the member lease and a heartbeat"}
}

// RunsMember: each worker is a partition member (the member faults).
func (accountsAlternative) RunsMember() {}

// SkipFault: its lease is a membership's (memberLease).
func (accountsAlternative) SkipFault(f engine.Fault) string { return memberLease(f) }

// memberLease says why late-renewal skips a partition member.
func memberLease(f engine.Fault) string {
	if f == engine.LateRenewal {
		return "its lease is a partition membership, renewed by heartbeats, which late-heartbeat holds"
	}
	return ""
}

func (accountsAlternative) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	return newAccountsAlt(ctx, env, false)
}

// accountsVerifiedAlternative is accountsAlternative whose write is one
// transaction: Verify (the epoch is still the partition's, its ownership
// row share-locked until the commit, so no claim lands in between), then
// the append with no epoch condition of its own. A stale owner's Verify
// refuses it.
type accountsVerifiedAlternative struct{}

func init() { engine.RegisterApproach(accountsVerifiedAlternative{}) }

func (accountsVerifiedAlternative) Scenario() string          { return "accounts" }
func (accountsVerifiedAlternative) Approach() engine.Approach { return engine.VerifiedAlternative }
func (accountsVerifiedAlternative) Label() string {
	return "partition.Member.Do: each worker a member; the owner's serial executor reads, then one transaction: Postgres.Verify (the epoch is current) + the next number and the event"
}
func (accountsVerifiedAlternative) Protection(p engine.Params) engine.Protection {
	return accountsAlternative{}.Protection(p)
}

func (accountsVerifiedAlternative) RunsMember() {}

// SkipFault: its lease is a membership's (memberLease).
func (accountsVerifiedAlternative) SkipFault(f engine.Fault) string { return memberLease(f) }

// CommitsTransactions: each append is a transaction, Verify and the write.
func (accountsVerifiedAlternative) CommitsTransactions() {}

// PassesInTx: between Verify and the append.
func (accountsVerifiedAlternative) PassesInTx() {}

func (accountsVerifiedAlternative) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	return newAccountsAlt(ctx, env, true)
}

// newAccountsAlt is a member's client of the alternative, its writes fenced
// by Verify when verify is set, by Condition otherwise.
func newAccountsAlt(ctx context.Context, env *engine.Env, verify bool) (engine.Client, error) {
	store, err := partition.NewPostgres(env.DB, nil)
	if err != nil {
		return nil, err
	}
	front, err := listen()
	if err != nil {
		return nil, err
	}
	ttl, interval, move := accountsMembers(env.Clients)
	m, err := partition.NewMember(approach.Membership{Membership: store, Env: env}, &partition.Config{
		Name: approach.Holder(env), Addr: front.addr(), TTL: ttl,
		Interval: interval, MoveInterval: move, Forward: forwardConfig(),
		MeterProvider: env.MeterProvider,
	})
	if err == nil {
		err = m.Start(ctx)
	}
	if err != nil {
		return nil, errors.Join(err, front.close())
	}
	c := &accountsAltClient{env: env, store: store, member: m, verify: verify, last: map[string]cachedSeq{},
		front: front}
	if err := c.settle(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	front.serve(c)
	c.hostile = startHostile(ctx, env, m)
	c.probes = startProber(ctx, c)
	return c, nil
}

// settle waits until the member sees the whole fleet and owns exactly the
// partitions the ring places on it, so that the run does not measure the
// fleet's first handovers; within startBound: eight members settling on a
// loaded machine have been seen to need more than thirty seconds, and the
// last of 64 workers starts tens of seconds after the first.
func (c *accountsAltClient) settle(ctx context.Context) error {
	bound := engine.StartBound(c.env.Clients)
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		r := c.member.Ring()
		want := 0
		for p := 0; p < r.Partitions(); p++ {
			if r.Owner(p) == c.member.Name() {
				want++
			}
		}
		members, owned := len(r.Members()), len(c.member.Owned())
		if members == c.env.Clients && owned == want {
			return nil
		}
		if !engine.Sleep(ctx, 10*time.Millisecond) {
			return fmt.Errorf("harness: accounts: the partitions did not settle on %d members within %v (this member saw %d, owned %d of the %d partitions the ring places on it): %w",
				c.env.Clients, bound, members, owned, want, ctx.Err())
		}
	}
}

type accountsAltClient struct {
	env    *engine.Env
	store  *partition.Postgres
	member *partition.Member
	verify bool // fence with Verify in a transaction, not Condition

	// last caches each entity's last number as this member wrote it,
	// valid for the epoch it was written under: while the member owns the
	// partition nobody else writes the entity, so an append needs no read
	// (one round trip, as the partition package's docs count it). A new
	// epoch, or a write that failed, drops it.
	mu   sync.Mutex
	last map[string]cachedSeq

	front   *frontend
	probes  *prober
	hostile *hostile // nil but on odd workers
}

// cachedSeq is an entity's last number, written under epoch.
type cachedSeq struct {
	epoch partition.Epoch
	seq   int64
}

// ownedKey picks an entity of a partition the member owns, if any.
func (c *accountsAltClient) ownedKey() (string, bool) {
	owned := map[int]bool{}
	for _, e := range c.member.Owned() {
		owned[e.Partition] = true
	}
	if len(owned) == 0 {
		return "", false
	}
	from := c.env.Rand.IntN(c.env.Keys)
	for i := 0; i < c.env.Keys; i++ {
		k := engine.Key("account-", (from+i)%c.env.Keys)
		if owned[c.member.Partition(k)] {
			return k, true
		}
	}
	return "", false
}

func (c *accountsAltClient) Op(ctx context.Context) error {
	key, ok := c.ownedKey()
	if !ok {
		// Nothing to do here: the entities are another member's.
		engine.Sleep(ctx, 5*time.Millisecond)
		return nil
	}
	ctx, op, err := accountAppend(ctx, c.env, key)
	if err != nil {
		return err
	}
	var seq int64
	var sent history.Time // when the first write was sent
	retries := 0
	for {
		err = c.member.Do(ctx, key, func(_ context.Context, e partition.Epoch) error {
			defer c.probes.ran(key)()
			approach.Acting(ctx, c.env, e)
			var err error
			seq, err = c.append(ctx, op, e, &sent)
			return err
		})
		// A partition on the move, or gone elsewhere meanwhile, runs
		// nothing: the client asks again, as it would ask the new owner.
		if !errors.Is(err, partition.ErrMoving) && !errors.Is(err, partition.ErrNotOwner) || !engine.Sleep(ctx, 2*time.Millisecond) {
			break
		}
		retries++
	}
	op.Set("retries", strconv.Itoa(retries))
	if sent != 0 {
		op.Set(metaWriteSent, strconv.FormatInt(int64(sent), 10))
	}
	return op.Finish(SeqOutput{Seq: seq}, err, partition.ErrStaleEpoch, errStaleSeq)
}

// append writes the entity's next number, fenced by the epoch, after the
// last one it cached under this epoch or read, on the operation's context
// (whose values the tracer and the points need); the write is sent
// whatever its deadline. The write also requires the number it follows, so
// that a wrong cache refuses rather than duplicates. It sets *sent, if
// zero, to when the write was sent.
func (c *accountsAltClient) append(ctx context.Context, op *engine.Invocation, e partition.Epoch, sent *history.Time) (int64, error) {
	c.mu.Lock()
	cached, ok := c.last[op.Key()]
	delete(c.last, op.Key())
	c.mu.Unlock()
	last := cached.seq
	if !ok || cached.epoch != e {
		if err := c.env.DB.QueryRow(ctx, sqlAccountsRead, op.Key()).Scan(&last); err != nil {
			return 0, err
		}
	}
	c.env.BeforeWrite(ctx, "harness.accounts.alternative.before-write")
	if *sent == 0 {
		*sent = history.Now()
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engine.WriteTimeout)
	defer cancel()
	var tag pgconn.CommandTag
	var err error
	if c.verify {
		tag, err = c.verifiedWrite(wctx, op, e, last)
	} else {
		cond, args := c.store.Condition(e, 5)
		tag, err = c.env.DB.Exec(wctx, fmt.Sprintf(sqlAccountsPartitioned, cond),
			append([]any{op.Key(), last + 1, last, op.ID()}, args...)...)
	}
	if err == nil && tag.RowsAffected() == 0 {
		if err = c.store.Check(wctx, e); err == nil {
			err = errStaleSeq
			op.Set(metaFollows, strconv.FormatInt(last, 10))
		}
	}
	if errors.Is(err, partition.ErrStaleEpoch) {
		// Evidence for the exclusivity check: a refusal that came back
		// while the ownership was certainly in force is the store's
		// fault, not the owner's.
		approach.RefusedStale(ctx, c.env, e)
	}
	if err == nil {
		c.mu.Lock()
		c.last[op.Key()] = cachedSeq{epoch: e, seq: last + 1}
		c.mu.Unlock()
	}
	return last + 1, err
}

// sqlVerifiedOwner stands for Condition in the append of the verified
// alternative: Verify proved the epoch in the transaction, and the
// statement only names the owner ($6) it was proven for.
const sqlVerifiedOwner = `$6::text IS NOT NULL`

// verifiedWrite is the verified alternative's append: Verify, then the
// append, in one transaction.
func (c *accountsAltClient) verifiedWrite(ctx context.Context, op *engine.Invocation, e partition.Epoch, last int64) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := pgx.BeginFunc(ctx, c.env.DB, func(tx pgx.Tx) error {
		if err := c.store.Verify(ctx, tx, e); err != nil {
			return err
		}
		c.env.BeforeWrite(ctx, "harness.accounts.alternative.in-tx")
		var err error
		tag, err = tx.Exec(ctx, fmt.Sprintf(sqlAccountsPartitioned, sqlVerifiedOwner),
			op.Key(), last+1, last, op.ID(), e.Partition, e.Owner, e.Token)
		return err
	})
	return tag, err
}

func (c *accountsAltClient) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.hostile.close()
	if c.probes != nil {
		c.probes.close()
	}
	return errors.Join(c.front.close(), c.member.Stop(ctx))
}
