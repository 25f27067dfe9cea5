package failpoint

import (
	"os"
	"runtime"
	"syscall"
)

// stopSelf sends SIGSTOP to the calling thread. Sent to the process, the
// signal stops it only once some thread of it next handles signals — not
// necessarily the caller, which may meanwhile run on past the point and
// make its write: the pause would then land after the write instead of
// before it. Sent to the caller's thread, it is handled as the kill returns,
// and the thread stops first, the rest of the process with it.
func stopSelf() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
