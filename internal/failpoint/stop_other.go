//go:build !linux

package failpoint

import (
	"os"
	"syscall"
)

// stopSelf sends SIGSTOP to the process: without a thread-directed kill the
// caller may run on a little before the process stops.
func stopSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
