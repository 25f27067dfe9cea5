package accounts

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// accountsVerified appends under a lease lock verified in the write's
// transaction: lock the entity, plain read of its last number, then one
// transaction that proves the lease is still the lock's current tenure
// (Verify share-locks the lock's row, so no takeover can commit before the
// transaction ends) and writes the next number and the event. A holder
// stopped past its lease finds a newer tenure, or none: its append is
// refused.
type accountsVerified struct{}

func init() { engine.RegisterApproach(accountsVerified{}) }

func (accountsVerified) Scenario() string          { return "accounts" }
func (accountsVerified) Approach() engine.Approach { return engine.VerifiedLock }
func (accountsVerified) Label() string {
	return "fencedlock.Locker: lock entity → SELECT → one transaction: Postgres.Verify (the lease is the current tenure) + write + event → release"
}
func (accountsVerified) Protection(p engine.Params) engine.Protection { return engine.LockTTL(p) }

// CommitsTransactions: each append is a transaction, Verify and the write.
func (accountsVerified) CommitsTransactions() {}

// PassesInTx: between Verify and the write.
func (accountsVerified) PassesInTx() {}

// SkipFault: not under the failover fault, whose lock service is another
// database than the entities'.
func (accountsVerified) SkipFault(f engine.Fault) string {
	if f == engine.Failover {
		return "Verify proves the lease in the resource's own transaction, and the failover fault puts the lock service in another database"
	}
	return ""
}

func (accountsVerified) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	l, err := approach.NaiveLocker(env, "accounts/")
	if err != nil {
		return nil, err
	}
	// The store Verify runs on: the lock's tables, in the run's schema,
	// where the entities are too.
	locks, err := fencedlock.NewPostgres(env.DB, nil)
	if err != nil {
		return nil, err
	}
	return &accountsVerifiedClient{env: env, locker: l, locks: locks}, nil
}

type accountsVerifiedClient struct {
	env    *engine.Env
	locker *fencedlock.Locker
	locks  *fencedlock.Postgres
}

func (c *accountsVerifiedClient) Op(ctx context.Context) error {
	ctx, op, err := accountAppend(ctx, c.env, accountKey(c.env))
	if err != nil {
		return err
	}
	var seq int64
	err = c.locker.Do(ctx, op.Key(), func(_ context.Context, lease fencedlock.Lease) error {
		var err error
		seq, err = c.append(ctx, op, lease)
		return err
	})
	return op.Finish(SeqOutput{Seq: seq}, err, fencedlock.ErrFenced, fencedlock.ErrNotHeld)
}

// append reads the entity's last number and, in one transaction, verifies
// the lease and writes the next, on the operation's context: a stopped
// process does not see its lease's context end, and Verify must refuse it
// without that.
func (c *accountsVerifiedClient) append(ctx context.Context, op *engine.Invocation, lease fencedlock.Lease) (int64, error) {
	var last int64
	if err := c.env.DB.QueryRow(ctx, sqlAccountsRead, op.Key()).Scan(&last); err != nil {
		return 0, err
	}
	c.env.BeforeWrite(ctx, "harness.accounts.verified.before-write")
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engine.WriteTimeout)
	defer cancel()
	err := pgx.BeginFunc(wctx, c.env.DB, func(tx pgx.Tx) error {
		if err := c.locks.Verify(wctx, tx, lease); err != nil {
			return err
		}
		c.env.BeforeWrite(wctx, "harness.accounts.verified.in-tx")
		_, err := tx.Exec(wctx, sqlAccountsNaiveWrite, op.Key(), last+1, op.ID())
		return err
	})
	if err != nil {
		return last + 1, fmt.Errorf("harness: accounts: append to %s: %w", op.Key(), err)
	}
	op.Took()
	return last + 1, nil
}

func (c *accountsVerifiedClient) Close() error { return nil }
