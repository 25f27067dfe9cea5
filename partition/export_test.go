package partition

import (
	"errors"
	"net/http"
	"time"
)

// Crash stops m as a crash would: no handoff, no release, no Leave; its
// lease runs out in the store. m counts as stopped afterwards.
func Crash(m *Member) {
	m.life <- struct{}{}
	m.state = stopped
	<-m.life
	m.cancel(errors.New("crashed"))
	<-m.loopDone
	m.halt("crashed")
	m.wg.Wait()
	close(m.stopped)
}

// Queued returns how many calls wait in the queue of key's partition on m.
func Queued(m *Member, key string) int {
	m.mu.RLock()
	x := m.execs[m.Partition(key)]
	m.mu.RUnlock()
	if x == nil {
		return 0
	}
	return len(x.jobs)
}

// SignForward returns the ForwardedHeader with which m forwards r at at.
func SignForward(m *Member, r *http.Request, at time.Time) string { return m.signForward(r, at) }
