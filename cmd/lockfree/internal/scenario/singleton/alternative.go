package singleton

import (
	"context"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// singletonAlternative runs each job on its fenced leader (package leader):
// the term is the job's fencing token, raised by the fenced read of every
// run and checked by its closing's write. A leader paused past its lease
// wakes with a term the job has seen a higher one than: its closing is
// refused.
type singletonAlternative struct{}

func init() { engine.RegisterApproach(singletonAlternative{}) }

func (singletonAlternative) Scenario() string          { return "singleton" }
func (singletonAlternative) Approach() engine.Approach { return engine.Alternative }
func (singletonAlternative) Label() string {
	return "fenced leader (leader.Campaign, one term per job): fenced read with the term → closing with a fenced write"
}
func (singletonAlternative) Protection(p engine.Params) engine.Protection { return engine.LockTTL(p) }

func (singletonAlternative) NewClient(ctx context.Context, env *engine.Env) (engine.Client, error) {
	return newLeaderClient(ctx, env, true, "harness.singleton.alternative.before-write")
}
