package harness

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// VerifiedLock is the lease lock fenced by fencedlock.Postgres.Verify: the
// fencing a resource that lives in the lock's own database needs, with no
// token column. It runs on accounts, whose entities are rows beside the
// lock table; not under the failover fault, whose lock service is another
// database.
const VerifiedLock Approach = "verified-lock"

// accountsVerified appends under a lease lock verified in the write's
// transaction: lock the entity, plain read of its last number, then one
// transaction that proves the lease is still the lock's current tenure
// (Verify share-locks the lock's row, so no takeover can commit before the
// transaction ends) and writes the next number and the event. A holder
// stopped past its lease finds a newer tenure, or none: its append is
// refused.
type accountsVerified struct{}

func init() { RegisterApproach(accountsVerified{}) }

func (accountsVerified) Scenario() string   { return "accounts" }
func (accountsVerified) Approach() Approach { return VerifiedLock }
func (accountsVerified) Label() string {
	return "fencedlock.Locker: lock entity → SELECT → one transaction: Postgres.Verify (the lease is the current tenure) + write + event → release"
}
func (accountsVerified) Protection(p Params) Protection { return lockTTL(p) }

func (accountsVerified) NewClient(_ context.Context, env *Env) (Client, error) {
	l, err := newNaiveLocker(env, "accounts/")
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
	env    *Env
	locker *fencedlock.Locker
	locks  *fencedlock.Postgres
}

func (c *accountsVerifiedClient) Op(ctx context.Context) error {
	ctx, op, err := accountAppend(ctx, c.env, accountKey(c.env))
	if err != nil {
		return err
	}
	var seq int64
	err = c.locker.Do(ctx, op.key, func(_ context.Context, lease fencedlock.Lease) error {
		var err error
		seq, err = c.append(ctx, op, lease)
		return err
	})
	return op.Finish(history.SeqOutput{Seq: seq}, err, fencedlock.ErrFenced, fencedlock.ErrNotHeld)
}

// append reads the entity's last number and, in one transaction, verifies
// the lease and writes the next, on the operation's context: a stopped
// process does not see its lease's context end, and Verify must refuse it
// without that.
func (c *accountsVerifiedClient) append(ctx context.Context, op *Op, lease fencedlock.Lease) (int64, error) {
	var last int64
	if err := c.env.DB.QueryRow(ctx, sqlAccountsRead, op.key).Scan(&last); err != nil {
		return 0, err
	}
	c.env.BeforeWrite(ctx, "harness.accounts.verified.before-write")
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	err := pgx.BeginFunc(wctx, c.env.DB, func(tx pgx.Tx) error {
		if err := c.locks.Verify(wctx, tx, lease); err != nil {
			return err
		}
		_, err := tx.Exec(wctx, sqlAccountsNaiveWrite, op.key, last+1, op.ID())
		return err
	})
	if err != nil {
		return last + 1, fmt.Errorf("harness: accounts: append to %s: %w", op.key, err)
	}
	op.Took()
	return last + 1, nil
}

func (c *accountsVerifiedClient) Close() error { return nil }
