package harness

import (
	"context"

	"github.com/lockfree-go/lockfree/internal/history"
)

// sqlDocumentsRaw is the least an edit can be: one statement that reads the
// document under its row lock and writes it back with the edit, returning
// the state it was based on.
const sqlDocumentsRaw = `UPDATE documents d SET doc_version = o.doc_version + 1, head = $2, version = d.version + 1
FROM (SELECT id, doc_version, head FROM documents WHERE id = $1 FOR UPDATE) o
WHERE d.id = o.id
RETURNING o.doc_version, o.head`

// documentsRaw is bare SQL: the read and the write are one statement, the
// row lock orders the edits.
type documentsRaw struct{}

func init() { RegisterApproach(documentsRaw{}) }

func (documentsRaw) Scenario() string   { return "documents" }
func (documentsRaw) Approach() Approach { return Raw }
func (documentsRaw) Label() string {
	return "bare SQL: one UPDATE … FROM (SELECT … FOR UPDATE) RETURNING the state it was based on"
}
func (documentsRaw) Protection(Params) Protection { return Protection{} }

func (documentsRaw) NewClient(_ context.Context, env *Env) (Client, error) {
	return &documentsRawClient{env: env}, nil
}

type documentsRawClient struct {
	env *Env
	n   int
}

func (c *documentsRawClient) Op(ctx context.Context) error {
	ctx, op, name, err := docEdit(ctx, c.env, &c.n)
	if err != nil {
		return err
	}
	c.env.BeforeWrite(ctx, "harness.documents.raw.before-write")
	var based history.DocState
	err = c.env.DB.QueryRow(ctx, sqlDocumentsRaw, op.key, name).Scan(&based.Version, &based.Head)
	return op.Finish(based, err)
}

func (c *documentsRawClient) Close() error { return nil }
