package documents

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/occ"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// documentsAlternative edits with occ.Update: read the row and its version,
// change it, write it back only at that version, retry on a conflict. A
// writer that paused between its read and its write finds the version moved
// on: its write is refused and retried on a fresh read. A delete is
// occ's Delete at the version read (retried likewise), with the deleted
// state written in its transaction; a create, of a document Update found
// deleted, is occ's Insert, refused if the document exists again.
type documentsAlternative struct{}

func init() { engine.RegisterApproach(documentsAlternative{}) }

func (documentsAlternative) Scenario() string          { return "documents" }
func (documentsAlternative) Approach() engine.Approach { return engine.Alternative }
func (documentsAlternative) Label() string {
	return "occ.Update: SELECT the row, change, UPDATE … WHERE version = $v; retry on conflict (delete: occ Delete at the version read; create: occ Insert, a conflict if it exists)"
}
func (documentsAlternative) Protection(engine.Params) engine.Protection { return engine.Protection{} }

// CommitsTransactions: a delete (the deleted state, then the row) and a
// create (the deleted state held, then the insert) are each a transaction.
func (documentsAlternative) CommitsTransactions() {}

// PassesInTx: a delete between its deleted state and the delete, a create
// after its insert.
func (documentsAlternative) PassesInTx() {}

func (documentsAlternative) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	s, err := occ.NewPostgres[string, document](env.DB, "documents", &occ.TableConfig{MeterProvider: env.MeterProvider})
	if err != nil {
		return nil, err
	}
	probe, err := newIDProber(env, s)
	if err != nil {
		return nil, err
	}
	return &documentsAltClient{env: env, store: s, probe: probe}, nil
}

type documentsAltClient struct {
	env   *engine.Env
	store *occ.Postgres[string, document]
	probe *idProber
	n     int
}

// deleteRetries is how many times a delete refused by a conflict is tried
// again on a fresh read, as occ.Update's default retries an update.
const deleteRetries = 10

func (c *documentsAltClient) Op(ctx context.Context) error {
	ctx, op, name, del, err := docEdit(ctx, c.env, &c.n)
	if err != nil {
		return err
	}
	var based history.DocState
	retries := 0
	if del {
		for {
			based, err = c.delete(ctx, op.Key(), name)
			if !errors.Is(err, occ.ErrConflict) || retries == deleteRetries {
				break
			}
			retries++
		}
	} else {
		id := c.probe.id()
		var version int64
		version, err = occ.Update(ctx, c.store, op.Key(), func(d *document) error {
			based = d.edit(name) // the last attempt's read is the one written on
			return nil           // occ.update.before-write follows
		}, append(id, occ.OnRetry(func(int, error) { retries++ }))...)
		if err == nil {
			c.probe.afterEdit(ctx, op.Key(), id, version)
		}
		if errors.Is(err, occ.ErrNotFound) {
			based, err = c.create(ctx, op.Key(), name)
		}
	}
	op.Set("retries", strconv.Itoa(retries))
	return op.Finish(based, err, occ.ErrConflict, occ.ErrNotFound)
}

// delete reads the document and deletes it at the version read, recording
// its deleted state in the same transaction.
func (c *documentsAltClient) delete(ctx context.Context, key, name string) (history.DocState, error) {
	d, v, err := c.store.Load(ctx, key)
	if err != nil {
		return history.DocState{}, err
	}
	based := d.edit(name)
	c.env.BeforeWrite(ctx, "harness.documents.alternative.delete.before-write")
	// The deleted state first: a create holding it (FOR SHARE) makes this
	// wait before the row is gone, never after.
	return based, pgx.BeginFunc(ctx, c.env.DB, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlDocumentsBury, key, d.DocVersion, d.Head, v); err != nil {
			return err
		}
		c.env.BeforeWrite(ctx, "harness.documents.alternative.delete.in-tx")
		return c.store.WithDB(tx).Delete(ctx, key, v)
	})
}

// create inserts the document on its deleted state, which it holds until
// the insert commits: occ's Insert refuses it if the document exists.
func (c *documentsAltClient) create(ctx context.Context, key, name string) (based history.DocState, err error) {
	err = pgx.BeginFunc(ctx, c.env.DB, func(tx pgx.Tx) error {
		if based, err = readGone(ctx, tx, sqlDocumentsGoneShare, key); err != nil {
			return err
		}
		c.env.BeforeWrite(ctx, "harness.documents.alternative.create.before-write")
		if _, err := c.store.WithDB(tx).Insert(ctx, created(key, name, based)); err != nil {
			return err
		}
		c.env.BeforeWrite(ctx, "harness.documents.alternative.create.in-tx")
		return nil
	})
	return based, err
}

func (c *documentsAltClient) Close() error { return nil }
