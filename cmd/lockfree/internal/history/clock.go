//go:build linux || darwin || freebsd || openbsd || dragonfly || solaris || illumos

package history

import "golang.org/x/sys/unix"

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
