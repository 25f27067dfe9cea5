package partition

import "errors"

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
