package accounts

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// sqlAccountsRaw is the least an append can be: one statement, the UPDATE's
// row lock ordering the appends.
const sqlAccountsRaw = `WITH u AS (
	UPDATE accounts SET last_seq = last_seq + 1 WHERE id = $1 RETURNING id, last_seq)
INSERT INTO account_events (account, seq, appended_by) SELECT id, last_seq, $2 FROM u RETURNING seq`

// accountsRaw is bare SQL: one statement per append.
type accountsRaw struct{}

func init() { engine.RegisterApproach(accountsRaw{}) }

func (accountsRaw) Scenario() string          { return "accounts" }
func (accountsRaw) Approach() engine.Approach { return engine.Raw }
func (accountsRaw) Label() string {
	return "bare SQL: one statement, UPDATE last_seq + 1 → INSERT event (the row lock orders them)"
}
func (accountsRaw) Protection(engine.Params) engine.Protection { return engine.Protection{} }

func (accountsRaw) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	return &accountsRawClient{env: env}, nil
}

type accountsRawClient struct{ env *engine.Env }

func (c *accountsRawClient) Op(ctx context.Context) error {
	ctx, op, err := accountAppend(ctx, c.env, accountKey(c.env))
	if err != nil {
		return err
	}
	c.env.BeforeWrite(ctx, "harness.accounts.raw.before-write")
	var seq int64
	err = c.env.DB.QueryRow(ctx, sqlAccountsRaw, op.Key(), op.ID()).Scan(&seq)
	return op.Finish(SeqOutput{Seq: seq}, err)
}

func (c *accountsRawClient) Close() error { return nil }
