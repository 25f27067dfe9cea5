//go:build linux || darwin || freebsd || openbsd || dragonfly || solaris || illumos

package history

import (
	"time"

	"golang.org/x/sys/unix"
)

// Now reads CLOCK_MONOTONIC. On Linux it is one clock for the whole
// machine, unaffected by changes to the wall clock, so the Call and Return
// of operations recorded by different worker processes can be compared;
// time.Now's monotonic reading cannot be compared across processes.
func Now() Time {
	var ts unix.Timespec
	// CLOCK_MONOTONIC cannot fail on a kernel that runs Go.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return Time(ts.Nano())
}

// WallOffset reads CLOCK_REALTIME less CLOCK_MONOTONIC, the wall clock's
// lead over the history clock, and the history time it was read at. A
// reading the scheduler interrupted (the two monotonic reads around the
// wall clock's more than 100 µs apart) is not one: ok is false.
func WallOffset() (off time.Duration, at Time, ok bool) {
	var m1, r, m2 unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &m1)
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &r)
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &m2)
	if m2.Nano()-m1.Nano() > int64(100*time.Microsecond) {
		return 0, 0, false
	}
	mid := (m1.Nano() + m2.Nano()) / 2
	return time.Duration(r.Nano() - mid), Time(mid), true
}
