//go:build !(linux || darwin || freebsd || openbsd || dragonfly || solaris || illumos)

package history

import "time"

var start = time.Now()

// Now reads this process's monotonic clock. On this platform it is not
// comparable across processes: record a multi-process history on Linux.
func Now() Time { return Time(time.Since(start)) }
