package engine

import "slices"

// Clients that share a worker process (Config.Procs, Handlers): which
// faults such a run injects, how many clients each process runs, and which
// worker runs a client of the history.

// procFaults are the faults a run with several clients per process
// injects: they hit a whole process (stop it, stall it, cut or slow its
// connections, lose an answer on its way to it) or the whole server, and
// random schedules of the first kind. The others act on one client's
// identity (a crash's replacement, a member's heartbeats, a lease's
// renewals) and run with one client per process.
var procFaults = []Fault{Pause, Stall, Isolate, Delay, LostCommit, LostReply, Restart, Random}

// ProcFaults are the faults a run with several clients per process
// (Config.Procs) injects.
func ProcFaults() []Fault { return slices.Clone(procFaults) }

// SharesProcesses reports whether sc's clients may share a worker process
// (Sharing).
func SharesProcesses(sc Scenario) bool {
	_, ok := sc.(Sharing)
	return ok
}

// lanes is how many clients each worker process runs.
func (c Config) lanes() int {
	if c.Procs <= 0 || c.Procs > c.Clients {
		return 1
	}
	return c.Clients / c.Procs
}

// procs is how many worker processes run the clients.
func (c Config) procs() int { return c.Clients / c.lanes() }

// workerOf is the worker whose process runs history client client, by
// the worker's number: its first client's (workerConfig.Client). With
// several clients per process, client c runs in the worker of c - c%lanes;
// a number from Clients on (the check's lane, a crashed worker's
// replacement) is its own.
func (c Config) workerOf(client int) int {
	if client >= c.Clients {
		return client
	}
	return client - client%c.lanes()
}

// clientsOf lists the history clients of workers, in order (workerOf's
// inverse).
func (c Config) clientsOf(workers []int) []int {
	var out []int
	for _, w := range workers {
		if w >= c.Clients {
			out = append(out, w)
			continue
		}
		for i := range c.lanes() {
			out = append(out, w+i)
		}
	}
	return out
}

// forApproach is c as def runs it: a Handlers approach's clients share
// processes, unless c already has them share; two at least, so that a
// fault that stops one has another to take its keys over.
func (c Config) forApproach(def ApproachDef) Config {
	h, ok := def.(Handlers)
	if !ok || c.lanes() > 1 {
		return c
	}
	for l := min(h.Handlers(), c.Clients/2); l > 1; l-- { // two processes at least: a taker for a stopped one
		if c.Clients%l == 0 {
			c.Procs = c.Clients / l
			return c
		}
	}
	return c
}
