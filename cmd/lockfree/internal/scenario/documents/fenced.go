package documents

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/occ"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
)

// The fenced twin's fences: the document's row, and its deleted state.
var (
	documentsFence     = fencedlock.Fence{Table: "documents", Key: "id"}
	documentsGoneFence = fencedlock.Fence{Table: "documents_gone", Key: "id"}
)

// The fenced twin's create and delete, each one statement conditioned on
// the token: a create only while the deleted state has seen no higher
// token (and no row exists), a delete only while the row has not; the
// delete leaves the token on the deleted state, the create on the row.
const (
	sqlDocumentsFencedCreate = `INSERT INTO documents (id, doc_version, head, fencing_token)
SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT FROM documents_gone WHERE id = $1 AND fencing_token <= $4)
ON CONFLICT (id) DO NOTHING`
	sqlDocumentsFencedDelete = `WITH d AS (DELETE FROM documents WHERE id = $1 AND fencing_token <= $4 RETURNING version)
INSERT INTO documents_gone (id, doc_version, head, version, fencing_token) SELECT $1, $2, $3, version, $4 FROM d
ON CONFLICT (id) DO UPDATE SET doc_version = EXCLUDED.doc_version, head = EXCLUDED.head, version = EXCLUDED.version,
	fencing_token = EXCLUDED.fencing_token`
	sqlDocumentsExists = `SELECT EXISTS (SELECT FROM documents WHERE id = $1)`
)

// documentsFenced edits with occ.Fenced: lock the document, fenced read,
// change, fenced write, release. A holder that pauses past its lease wakes
// with a token the row has seen a higher one than: its write is refused.
// Deletes and creates take the same lock and fence the row, or the deleted
// state, the same way.
type documentsFenced struct{}

func init() { engine.RegisterApproach(documentsFenced{}) }

func (documentsFenced) Scenario() string          { return "documents" }
func (documentsFenced) Approach() engine.Approach { return engine.FencedLock }
func (documentsFenced) Label() string {
	return "occ.Fenced: lock document → fenced read → change → fenced write → release (delete and create: the same lock, a fenced read of the row or the deleted state, one DELETE or INSERT conditioned on the token)"
}
func (documentsFenced) Protection(p engine.Params) engine.Protection {
	return engine.LockTTL(p)
}

func (documentsFenced) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	s, err := occ.NewPostgres[string, document](env.DB, "documents", nil)
	if err != nil {
		return nil, err
	}
	lc := fencedlock.LockerConfig{
		TTL:           env.LeaseTTL,
		Holder:        approach.Holder(env),
		LockPrefix:    "documents/",
		Wait:          approach.LockWait(),
		MeterProvider: env.MeterProvider,
	}
	f, err := occ.NewFenced(env.Locks, s, &occ.FencedConfig{LockerConfig: lc})
	if err != nil {
		return nil, err
	}
	l, err := fencedlock.NewLocker(env.Locks, &lc)
	if err != nil {
		return nil, err
	}
	return &documentsFencedClient{env: env, twin: f, locker: l}, nil
}

type documentsFencedClient struct {
	env    *engine.Env
	twin   *occ.Fenced[string, document]
	locker *fencedlock.Locker // the twin's lock, for deletes and creates
	n      int
}

func (c *documentsFencedClient) Op(ctx context.Context) error {
	ctx, op, name, del, err := docEdit(ctx, c.env, &c.n)
	if err != nil {
		return err
	}
	var based history.DocState
	if del {
		err = c.locker.Do(ctx, op.Key(), func(_ context.Context, l fencedlock.Lease) error {
			based, err = c.delete(ctx, op.Key(), name, l.Token)
			committed(op, err)
			return err
		})
		return op.Finish(based, err, fencedlock.ErrFenced, occ.ErrNotFound)
	}
	_, err = c.twin.Update(ctx, op.Key(), func(d *document) error {
		based = d.edit(name)
		return nil // occ.fenced.before-write follows
	})
	if errors.Is(err, occ.ErrNotFound) {
		err = c.locker.Do(ctx, op.Key(), func(_ context.Context, l fencedlock.Lease) error {
			based, err = c.create(ctx, op.Key(), name, l.Token)
			committed(op, err)
			return err
		})
	}
	return op.Finish(based, err, fencedlock.ErrFenced, occ.ErrConflict, occ.ErrNotFound)
}

// committed records that a delete or a create whose statement succeeded
// took effect: the lock's release, which follows, cannot undo it, so its
// failure must not record the operation as failed (the edit's Update does
// not report one).
func committed(op *engine.Invocation, err error) {
	if err == nil {
		op.Took()
	}
}

// delete is the fenced delete under the lock. Its statements run on the
// operation's context, not the lease's: a stopped process does not see its
// lease's context end, and the fence must hold without it.
func (c *documentsFencedClient) delete(ctx context.Context, key, name string, token int64) (history.DocState, error) {
	var d document
	err := documentsFence.Read(ctx, c.env.DB, key, token, "doc_version, head", &d.DocVersion, &d.Head)
	if errors.Is(err, fencedlock.ErrNotFound) {
		return history.DocState{}, fmt.Errorf("%w: %s is deleted", errDocumentGone, key)
	}
	if err != nil {
		return history.DocState{}, err
	}
	based := d.edit(name)
	c.env.BeforeWrite(ctx, "harness.documents.fenced.delete.before-write")
	tag, err := c.env.DB.Exec(ctx, sqlDocumentsFencedDelete, key, d.DocVersion, d.Head, token)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("%w: delete of %s with token %d", fencedlock.ErrFenced, key, token)
	}
	return based, err
}

// create is the fenced create under the lock, of a document the twin found
// deleted under an earlier lease. It first stamps the row, if there is one
// again: then the document exists (a conflict), and no holder stopped
// before its delete can delete it under this create; a holder stopped
// before its own create is refused by the deleted state's token.
func (c *documentsFencedClient) create(ctx context.Context, key, name string, token int64) (history.DocState, error) {
	based := history.DocState{Deleted: true}
	var d document
	err := documentsFence.Read(ctx, c.env.DB, key, token, "doc_version", &d.DocVersion)
	if err == nil {
		return based, &occ.ConflictError{Key: key}
	}
	if !errors.Is(err, fencedlock.ErrNotFound) {
		return based, err
	}
	err = documentsGoneFence.Read(ctx, c.env.DB, key, token, "doc_version, head", &based.Version, &based.Head)
	if err != nil {
		return based, err
	}
	c.env.BeforeWrite(ctx, "harness.documents.fenced.create.before-write")
	tag, err := c.env.DB.Exec(ctx, sqlDocumentsFencedCreate, key, based.Version+1, name, token)
	if err != nil || tag.RowsAffected() > 0 {
		return based, err
	}
	var exists bool
	if err := c.env.DB.QueryRow(ctx, sqlDocumentsExists, key).Scan(&exists); err != nil {
		return based, err
	}
	if exists {
		return based, &occ.ConflictError{Key: key}
	}
	return based, fmt.Errorf("%w: create of %s with token %d", fencedlock.ErrFenced, key, token)
}

func (c *documentsFencedClient) Close() error { return nil }
