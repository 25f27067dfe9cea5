package accounts

import (
	"context"
	"fmt"
	"strconv"

	"github.com/lockfree-go/lockfree/fencedlock"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// The twins' write: the entity's new last number and its event in one
// statement, fenced by the lease's token — or not, for the naive lock.
const (
	sqlAccountsFencedWrite = `WITH u AS (
	UPDATE accounts SET last_seq = $2, fencing_token = $4 WHERE id = $1 AND fencing_token <= $4 RETURNING id)
INSERT INTO account_events (account, seq, appended_by) SELECT id, $2, $3 FROM u`
	sqlAccountsNaiveWrite = `WITH u AS (
	UPDATE accounts SET last_seq = $2 WHERE id = $1 RETURNING id)
INSERT INTO account_events (account, seq, appended_by) SELECT id, $2, $3 FROM u`
)

// accountsFence is the fenced twin's token on each entity.
var accountsFence = fencedlock.Fence{Table: "accounts", Key: "id"}

// accountsFenced appends under a fenced lease lock: lock the entity, fenced
// read of its last number (raising its token), one statement that writes
// the next number and the event only while no later token has, release.
// A holder stopped past its lease wakes with a stale token: its append is
// refused.
type accountsFenced struct{}

func init() { engine.RegisterApproach(accountsFenced{}) }

func (accountsFenced) Scenario() string          { return "accounts" }
func (accountsFenced) Approach() engine.Approach { return engine.FencedLock }
func (accountsFenced) Label() string {
	return "fencedlock.Locker: lock entity → fenced read (stamps the token) → one statement: fenced write + event → release"
}
func (accountsFenced) Protection(p engine.Params) engine.Protection {
	return engine.LockTTL(p)
}

func (accountsFenced) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	return newAccountsLocked(env, false)
}

// accountsNaive is the same lock and statements without the token: a holder
// stopped past its lease appends the number the holder that took over
// appended too.
type accountsNaive struct{}

func init() { engine.RegisterApproach(accountsNaive{}) }

func (accountsNaive) Scenario() string          { return "accounts" }
func (accountsNaive) Approach() engine.Approach { return engine.NaiveLock }
func (accountsNaive) Label() string {
	return "lease lock (fencedlock.Locker): lock entity → SELECT → one statement: write + event, no token → release"
}
func (accountsNaive) Protection(p engine.Params) engine.Protection {
	return engine.LockTTL(p)
}

func (accountsNaive) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	return newAccountsLocked(env, true)
}

func newAccountsLocked(env *engine.Env, naive bool) (engine.Client, error) {
	l, err := approach.NaiveLocker(env, "accounts/")
	if err != nil {
		return nil, err
	}
	return &accountsLockedClient{env: env, locker: l, naive: naive}, nil
}

type accountsLockedClient struct {
	env    *engine.Env
	locker *fencedlock.Locker
	naive  bool
}

func (c *accountsLockedClient) Op(ctx context.Context) error {
	ctx, op, err := accountAppend(ctx, c.env, accountKey(c.env))
	if err != nil {
		return err
	}
	var seq int64
	err = c.locker.Do(ctx, op.Key(), func(_ context.Context, lease fencedlock.Lease) error {
		var err error
		seq, err = c.append(ctx, op, lease.Token)
		return err
	})
	return op.Finish(SeqOutput{Seq: seq}, err, fencedlock.ErrFenced)
}

// append reads the entity's last number and writes the next, on the
// operation's context: a stopped process does not see its lease's context
// end, and the fence must hold without it.
func (c *accountsLockedClient) append(ctx context.Context, op *engine.Invocation, token int64) (int64, error) {
	var last int64
	var err error
	if c.naive {
		err = c.env.DB.QueryRow(ctx, sqlAccountsRead, op.Key()).Scan(&last)
	} else {
		err = accountsFence.Read(ctx, c.env.DB, op.Key(), token, "last_seq", &last)
	}
	if err != nil {
		return 0, err
	}
	point := map[bool]string{false: "harness.accounts.fenced.before-write", true: "harness.accounts.naive.before-write"}[c.naive]
	c.env.BeforeWrite(ctx, point)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engine.WriteTimeout)
	defer cancel()
	if c.naive {
		_, err = c.env.DB.Exec(wctx, sqlAccountsNaiveWrite, op.Key(), last+1, op.ID())
		return last + 1, err
	}
	tag, err := c.env.DB.Exec(wctx, sqlAccountsFencedWrite, op.Key(), last+1, op.ID(), token)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("harness: accounts: append to %s with token %s: %w", op.Key(), strconv.FormatInt(token, 10), fencedlock.ErrFenced)
	}
	return last + 1, err
}

func (c *accountsLockedClient) Close() error { return nil }
