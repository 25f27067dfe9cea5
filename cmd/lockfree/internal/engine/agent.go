package engine

import "context"

// agent is a fault's part in a worker process, its state its own: it
// follows the fault's commands and the points the worker reaches. Every
// worker has the agents of every fault that has one (agentMaking); an agent
// whose fault the run does not inject is never armed.
type agent interface {
	// command follows c, and reports whether c was the agent's to follow.
	command(c command) bool
	// point handles the point name that an operation or background work
	// reached with ctx, and reports whether it was the agent's: the
	// worker's own handling of a before-write point then skips it.
	point(ctx context.Context, name string) bool
	// clear lets whatever the agent holds go on (cmdClear).
	clear()
}

// lockHook is an agent that holds requests to the lock service of the
// worker (recordingLocks): the late-renewal fault's.
type lockHook interface {
	// acquiring blocks an acquire of the operation of ctx while the agent
	// keeps its key from the other workers.
	acquiring(ctx context.Context)
	// renewing holds a renewal of the lease (name, token) on key while the
	// agent holds that lease's renewals, and reports whether it did.
	renewing(key, name string, token int64) bool
	// renewed reports the answer to a renewal that renewing held.
	renewed(key, name string, token int64, err error)
}

// newAgents returns the agents of every fault that has a part in worker w.
func newAgents(w *worker) []agent {
	var out []agent
	for _, k := range faultKinds {
		if m, ok := k.(agentMaking); ok {
			out = append(out, m.agent(w))
		}
	}
	return out
}

// lockHooks returns w's agents that hold requests to its lock service.
func (w *worker) lockHooks() []lockHook {
	var out []lockHook
	for _, a := range w.agents {
		if h, ok := a.(lockHook); ok {
			out = append(out, h)
		}
	}
	return out
}
