package engine

import "testing"

// A run is done with its faults once each fault asked for took effect
// MinFaults times: one fault's count does not stand in for another's.
func TestFaultsDone(t *testing.T) {
	r := &run{cfg: Config{Faults: []Fault{Pause, Isolate}, MinFaults: 2}, log: newRunLog(), injectors: make([]injector, 2)}
	steps := []struct {
		count Fault
		done  bool
	}{
		{Pause, false}, {Pause, false}, {Pause, false}, {Isolate, false}, {Isolate, true},
	}
	if r.faultsDone() {
		t.Fatal("done before any fault took effect")
	}
	for i, s := range steps {
		r.log.count(s.count)
		if got := r.faultsDone(); got != s.done {
			t.Fatalf("after step %d (%s: pause %d, isolate %d): done = %v, want %v", i, s.count, r.log.injectedOf(Pause), r.log.injectedOf(Isolate), got, s.done)
		}
	}
	if got := (Config{}).withDefaults().MinFaults; got != 1 {
		t.Errorf("MinFaults defaults to %d, want 1", got)
	}
}
