package harness

import (
	"context"
	"strconv"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/history"
)

// The naive lock's statements: the fenced twin's read and write without the
// token.
const (
	sqlDocumentsNaiveRead  = `SELECT doc_version, head FROM documents WHERE id = $1`
	sqlDocumentsNaiveWrite = `UPDATE documents SET doc_version = $1, head = $2, version = version + 1 WHERE id = $3`
)

// documentsNaive is the fenced twin without its fence, on the same
// fencedlock.Locker: lock, plain read, change, unconditional write,
// release. A holder that pauses past its lease writes over the edit of the
// holder that took over: a lost update.
type documentsNaive struct{}

func init() { RegisterApproach(documentsNaive{}) }

func (documentsNaive) Scenario() string   { return "documents" }
func (documentsNaive) Approach() Approach { return NaiveLock }
func (documentsNaive) Label() string {
	return "lease lock (fencedlock.Locker): lock document → SELECT → change → UPDATE without the token → release"
}
func (documentsNaive) Protection(p Params) Protection {
	return lockTTL(p)
}

func (documentsNaive) NewClient(_ context.Context, env *Env) (Client, error) {
	l, err := newNaiveLocker(env, "documents/")
	if err != nil {
		return nil, err
	}
	return &documentsNaiveClient{env: env, locker: l}, nil
}

// newNaiveLocker is the lock of a naive twin: the fenced twins' settings.
func newNaiveLocker(env *Env, prefix string) (*fencedlock.Locker, error) {
	return fencedlock.NewLocker(env.Locks, &fencedlock.LockerConfig{
		TTL:           env.LeaseTTL,
		Holder:        "worker-" + strconv.Itoa(env.Client),
		LockPrefix:    prefix,
		Wait:          &fencedlock.WaitConfig{MinDelay: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond},
		MeterProvider: env.MeterProvider,
	})
}

type documentsNaiveClient struct {
	env    *Env
	locker *fencedlock.Locker
	n      int
}

func (c *documentsNaiveClient) Op(ctx context.Context) error {
	ctx, op, name, err := docEdit(ctx, c.env, &c.n)
	if err != nil {
		return err
	}
	var based history.DocState
	// The statements run on the operation's context, not the lease's: a
	// stopped process does not see its lease's context end.
	err = c.locker.Do(ctx, op.key, func(context.Context, fencedlock.Lease) error {
		var d document
		if err := c.env.DB.QueryRow(ctx, sqlDocumentsNaiveRead, op.key).Scan(&d.DocVersion, &d.Head); err != nil {
			return err
		}
		based = d.edit(name)
		c.env.BeforeWrite(ctx, "harness.documents.naive.before-write")
		_, err := c.env.DB.Exec(ctx, sqlDocumentsNaiveWrite, d.DocVersion, d.Head, op.key)
		return err
	})
	return op.Finish(based, err)
}

func (c *documentsNaiveClient) Close() error { return nil }
