package singleton

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// singletonNaive is the alternative without its fence: the same election
// and terms, a plain read and a closing written without the term. A leader
// that believes it still leads (its lease's local deadline had not come
// when it read) closes a period its successor closes too.
type singletonNaive struct{}

func init() { engine.RegisterApproach(singletonNaive{}) }

func (singletonNaive) Scenario() string          { return "singleton" }
func (singletonNaive) Approach() engine.Approach { return engine.NaiveLock }
func (singletonNaive) Label() string {
	return "naive leader (leader.Campaign, its lease only): SELECT oldest open period → closing written without the term"
}
func (singletonNaive) Protection(p engine.Params) engine.Protection { return engine.LockTTL(p) }

func (singletonNaive) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	return newLeaderClient(ctx, env, false, "harness.singleton.naive.before-write")
}
