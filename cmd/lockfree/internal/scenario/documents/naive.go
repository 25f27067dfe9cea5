package documents

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/occ"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
)

// The naive lock's statements: the fenced twin's reads and writes without
// the token. A create overwrites whatever row is there; a delete removes
// the row and records the deleted state in one statement.
const (
	sqlDocumentsNaiveRead   = `SELECT doc_version, head FROM documents WHERE id = $1`
	sqlDocumentsNaiveWrite  = `UPDATE documents SET doc_version = $1, head = $2, version = version + 1 WHERE id = $3`
	sqlDocumentsNaiveCreate = `INSERT INTO documents (id, doc_version, head) VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE SET doc_version = EXCLUDED.doc_version, head = EXCLUDED.head, version = documents.version + 1`
	sqlDocumentsNaiveDelete = `WITH d AS (DELETE FROM documents WHERE id = $1 RETURNING version)
INSERT INTO documents_gone (id, doc_version, head, version) SELECT $1, $2, $3, version FROM d
ON CONFLICT (id) DO UPDATE SET doc_version = EXCLUDED.doc_version, head = EXCLUDED.head, version = EXCLUDED.version`
)

// documentsNaive is the fenced twin without its fence, on the same
// fencedlock.Locker: lock, plain read, change, unconditional write,
// release. A holder that pauses past its lease writes over the edit of the
// holder that took over: a lost update.
type documentsNaive struct{}

func init() { engine.RegisterApproach(documentsNaive{}) }

func (documentsNaive) Scenario() string          { return "documents" }
func (documentsNaive) Approach() engine.Approach { return engine.NaiveLock }
func (documentsNaive) Label() string {
	return "lease lock (fencedlock.Locker): lock document → SELECT → change → UPDATE (or INSERT, or DELETE) without the token → release"
}
func (documentsNaive) Protection(p engine.Params) engine.Protection {
	return engine.LockTTL(p)
}

func (documentsNaive) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	l, err := approach.NaiveLocker(env, "documents/")
	if err != nil {
		return nil, err
	}
	return &documentsNaiveClient{env: env, locker: l}, nil
}

type documentsNaiveClient struct {
	env    *engine.Env
	locker *fencedlock.Locker
	n      int
}

func (c *documentsNaiveClient) Op(ctx context.Context) error {
	ctx, op, name, del, err := docEdit(ctx, c.env, &c.n)
	if err != nil {
		return err
	}
	var based history.DocState
	// The statements run on the operation's context, not the lease's: a
	// stopped process does not see its lease's context end.
	err = c.locker.Do(ctx, op.Key(), func(context.Context, fencedlock.Lease) error {
		based, err = naiveDocOp(ctx, c.env, op.Key(), name, del, "harness.documents.naive.before-write", approach.SameContext)
		return err
	})
	return op.Finish(based, err, occ.ErrNotFound)
}

func (c *documentsNaiveClient) Close() error { return nil }

// naiveDocOp is the naive twins' operation under the lock they hold: plain
// reads, then, after the before-write point, unconditional writes on the
// context write makes: an edit, a delete, or a create of a deleted
// document.
func naiveDocOp(ctx context.Context, env *engine.Env, key, name string, del bool, point string,
	write func(context.Context) (context.Context, context.CancelFunc)) (history.DocState, error) {
	var d document
	err := env.DB.QueryRow(ctx, sqlDocumentsNaiveRead, key).Scan(&d.DocVersion, &d.Head)
	if errors.Is(err, pgx.ErrNoRows) {
		if del {
			return history.DocState{}, fmt.Errorf("%w: %s is deleted", errDocumentGone, key)
		}
		based, err := readGone(ctx, env.DB, sqlDocumentsGone, key)
		if err != nil {
			return based, err
		}
		env.BeforeWrite(ctx, point)
		wctx, cancel := write(ctx)
		defer cancel()
		_, err = env.DB.Exec(wctx, sqlDocumentsNaiveCreate, key, based.Version+1, name)
		return based, err
	}
	if err != nil {
		return history.DocState{}, err
	}
	based := d.edit(name)
	env.BeforeWrite(ctx, point)
	wctx, cancel := write(ctx)
	defer cancel()
	if del {
		_, err = env.DB.Exec(wctx, sqlDocumentsNaiveDelete, key, d.DocVersion, d.Head)
	} else {
		_, err = env.DB.Exec(wctx, sqlDocumentsNaiveWrite, d.DocVersion, d.Head, key)
	}
	return based, err
}
