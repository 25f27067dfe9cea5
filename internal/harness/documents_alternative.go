package harness

import (
	"context"
	"strconv"

	"github.com/lockfree-go/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/occ"
)

// documentsAlternative edits with occ.Update: read the row and its version,
// change it, write it back only at that version, retry on a conflict. A
// writer that paused between its read and its write finds the version moved
// on: its write is refused and retried on a fresh read.
type documentsAlternative struct{}

func init() { RegisterApproach(documentsAlternative{}) }

func (documentsAlternative) Scenario() string   { return "documents" }
func (documentsAlternative) Approach() Approach { return Alternative }
func (documentsAlternative) Label() string {
	return "occ.Update: SELECT the row, change, UPDATE … WHERE version = $v; retry on conflict"
}
func (documentsAlternative) Protection(Params) Protection { return Protection{} }

func (documentsAlternative) NewClient(_ context.Context, env *Env) (Client, error) {
	s, err := occ.NewPostgres[string, document](env.DB, "documents", &occ.TableConfig{MeterProvider: env.MeterProvider})
	if err != nil {
		return nil, err
	}
	return &documentsAltClient{env: env, store: s}, nil
}

type documentsAltClient struct {
	env   *Env
	store *occ.Postgres[string, document]
	n     int
}

func (c *documentsAltClient) Op(ctx context.Context) error {
	ctx, op, name, err := docEdit(ctx, c.env, &c.n)
	if err != nil {
		return err
	}
	var based history.DocState
	retries := 0
	_, err = occ.Update(ctx, c.store, op.key, func(d *document) error {
		based = d.edit(name) // the last attempt's read is the one written on
		return nil           // occ.update.before-write follows
	}, occ.OnRetry(func(int, error) { retries++ }))
	op.Set("retries", strconv.Itoa(retries))
	return op.Finish(based, err, occ.ErrConflict)
}

func (c *documentsAltClient) Close() error { return nil }
