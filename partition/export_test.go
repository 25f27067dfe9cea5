package partition

import "errors"

// PauseLoop stops m's heartbeats and reconciliation, as a process pause
// would, until resume is called. Do keeps admitting work until the member's
// lease is no longer safe, as a paused process's queued work would run when
// it wakes.
func PauseLoop(m *Member) (resume func()) {
	m.stepMu.Lock()
	return m.stepMu.Unlock
}

// Crash stops m as a crash would: no handoff, no release, no Leave; its
// lease runs out in the store.
func Crash(m *Member) {
	m.stop(errors.New("crashed"))
	<-m.loopDone
	m.stepMu.Lock()
	defer m.stepMu.Unlock()
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.abortAll("crashed")
	m.wg.Wait()
}
