package engine

import (
	"sync"
	"sync/atomic"
)

// extra holds the counters of what this worker process's client sends
// besides PostgreSQL, by name (ExtraCounter).
var extra = struct {
	sync.Mutex
	counters map[string]*atomic.Int64
}{counters: map[string]*atomic.Int64{}}

// ExtraCounter returns the process's counter named name of what its client
// sends besides PostgreSQL ("redis_round_trips": one per round trip): a
// worker reports how much each grew over the measured part, per operation
// (report.Result.Extra's name_per_op). A building block that talks to
// another service makes its counter once, in a package variable.
func ExtraCounter(name string) *atomic.Int64 {
	extra.Lock()
	defer extra.Unlock()
	c, ok := extra.counters[name]
	if !ok {
		c = new(atomic.Int64)
		extra.counters[name] = c
	}
	return c
}

// extraCounts returns what this worker process sent besides PostgreSQL, so
// far, by counter.
func extraCounts() map[string]int64 {
	extra.Lock()
	defer extra.Unlock()
	out := make(map[string]int64, len(extra.counters))
	for name, c := range extra.counters {
		out[name] = c.Load()
	}
	return out
}

// extraSince returns the counts sent since from (extraCounts), without the
// zeros: an approach that sent nothing to another service has nothing to
// show.
func extraSince(from map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, n := range extraCounts() {
		if d := n - from[k]; d > 0 {
			out[k] = d
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
