package documents

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/occ"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// The least each operation can be: one statement that reads under a row
// lock and writes, returning the state it was based on.
const (
	// sqlDocumentsRaw reads the document under its row lock and writes it
	// back with the edit; no row: the document is deleted.
	sqlDocumentsRaw = `UPDATE documents d SET doc_version = o.doc_version + 1, head = $2, version = d.version + 1
FROM (SELECT id, doc_version, head FROM documents WHERE id = $1 FOR UPDATE) o
WHERE d.id = o.id
RETURNING o.doc_version, o.head`
	// sqlDocumentsRawCreate creates a deleted document on its deleted
	// state, locked until the insert commits; no row: it exists again.
	sqlDocumentsRawCreate = `WITH g AS (SELECT doc_version, head FROM documents_gone WHERE id = $1 FOR UPDATE),
ins AS (INSERT INTO documents (id, doc_version, head) SELECT $1, doc_version + 1, $2 FROM g ON CONFLICT (id) DO NOTHING RETURNING id)
SELECT g.doc_version, g.head FROM g, ins`
	// sqlDocumentsRawDelete deletes the document and records its deleted
	// state; no row: it is deleted already. It locks the deleted state
	// before the row (g is the DELETE's init plan), as a create does, so
	// that the two cannot deadlock.
	sqlDocumentsRawDelete = `WITH g AS (SELECT id FROM documents_gone WHERE id = $1 FOR UPDATE),
d AS (DELETE FROM documents WHERE id = (SELECT id FROM g) RETURNING doc_version, head, version),
u AS (UPDATE documents_gone SET doc_version = d.doc_version + 1, head = $2, version = d.version FROM d WHERE documents_gone.id = $1)
SELECT doc_version, head FROM d`
)

// documentsRaw is bare SQL: the read and the write are one statement, the
// row lock (or the deleted state's) orders the operations.
type documentsRaw struct{}

func init() { engine.RegisterApproach(documentsRaw{}) }

func (documentsRaw) Scenario() string          { return "documents" }
func (documentsRaw) Approach() engine.Approach { return engine.Raw }
func (documentsRaw) Label() string {
	return "bare SQL: one UPDATE … FROM (SELECT … FOR UPDATE) RETURNING the state it was based on (delete: one DELETE … RETURNING with the deleted state's INSERT; create: one INSERT on the deleted state FOR UPDATE)"
}
func (documentsRaw) Protection(engine.Params) engine.Protection { return engine.Protection{} }

func (documentsRaw) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	return &documentsRawClient{env: env}, nil
}

type documentsRawClient struct {
	env *engine.Env
	n   int
}

// rawTries bounds an edit that finds the document deleted, then created
// again by another client before its own create, and so on.
const rawTries = 10

func (c *documentsRawClient) Op(ctx context.Context) error {
	ctx, op, name, del, err := docEdit(ctx, c.env, &c.n)
	if err != nil {
		return err
	}
	c.env.BeforeWrite(ctx, "harness.documents.raw.before-write")
	var based history.DocState
	if del {
		err = c.env.DB.QueryRow(ctx, sqlDocumentsRawDelete, op.Key(), name).Scan(&based.Version, &based.Head)
		if errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("%w: %s is deleted", errDocumentGone, op.Key())
		}
		return op.Finish(based, err, occ.ErrNotFound)
	}
	for range rawTries {
		based = history.DocState{}
		err = c.env.DB.QueryRow(ctx, sqlDocumentsRaw, op.Key(), name).Scan(&based.Version, &based.Head)
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
		based = history.DocState{Deleted: true}
		err = c.env.DB.QueryRow(ctx, sqlDocumentsRawCreate, op.Key(), name).Scan(&based.Version, &based.Head)
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("%w: %s was deleted and created again %d times meanwhile", occ.ErrConflict, op.Key(), rawTries)
	}
	return op.Finish(based, err, occ.ErrConflict)
}

func (c *documentsRawClient) Close() error { return nil }
