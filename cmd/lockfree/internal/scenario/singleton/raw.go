package singleton

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// sqlSingletonClaimClose is the raw approach's closing: the period's claim
// and its closing in one statement, the closing inserted only when the
// claim was (a concurrent one waits on the claim's primary key).
const sqlSingletonClaimClose = `WITH c AS (
	INSERT INTO singleton_claims (job, period) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING 1)
INSERT INTO closings (job, period, total, entries, term, closed_by)
SELECT $1::text, $2::bigint, s.total, s.entries, 0, $3::text FROM c, ` + sqlSingletonSum

// singletonRaw needs no leader: every instance runs every job, and the
// period's row is inserted only if no one inserted it. A paused instance
// wakes to find its period claimed, and closes nothing.
type singletonRaw struct{}

func init() { engine.RegisterApproach(singletonRaw{}) }

func (singletonRaw) Scenario() string          { return "singleton" }
func (singletonRaw) Approach() engine.Approach { return engine.Raw }
func (singletonRaw) Label() string {
	return "no leader: SELECT oldest open period → one statement, INSERT claim ON CONFLICT DO NOTHING → closing if it did"
}
func (singletonRaw) Protection(engine.Params) engine.Protection { return engine.Protection{} }

func (singletonRaw) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	j, err := newJobs(ctx, env)
	return &singletonRawClient{jobs: j}, err
}

type singletonRawClient struct{ jobs }

func (c *singletonRawClient) Op(ctx context.Context) error {
	ctx, op, err := c.invoke(ctx, c.pick())
	if err != nil {
		return err
	}
	return c.run(ctx, op, steps{point: "harness.singleton.raw.before-write",
		read: func(ctx context.Context) (int64, error) { return c.next(ctx, op) },
		write: func(ctx context.Context, p int64) (bool, error) {
			tag, err := c.env.DB.Exec(ctx, sqlSingletonClaimClose, op.Key(), p, op.ID())
			return err == nil && tag.RowsAffected() == 1, err
		}})
}

func (c *singletonRawClient) Close() error { return nil }
