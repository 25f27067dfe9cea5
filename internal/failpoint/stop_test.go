//go:build linux

package failpoint_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/testproc"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	testproc.Main(m, map[string]testproc.Program{"stopper": stopper})
}

// stopper reports its pid, then at each "stop" stops itself at a point and
// reports when (on the monotonic clock every process shares) it went on.
func stopper(in *bufio.Scanner, out io.Writer) error {
	fmt.Fprintf(out, "pid %d\n", os.Getpid())
	stop := failpoint.StopProcess()
	for in.Scan() {
		stop(context.Background(), point)
		fmt.Fprintf(out, "after %d\n", monotonic())
	}
	return in.Err()
}

// StopProcess stops the goroutine that reached the point before it returns:
// whatever that goroutine does next — the write after a before-write point —
// happens only once another process has sent SIGCONT. A process-directed
// SIGSTOP stops the process only when one of its threads next handles
// signals, and the caller may run on meanwhile (more often than not on a
// loaded machine), so the stop is tried many times.
func TestStopProcessStopsTheCallerBeforeItReturns(t *testing.T) {
	child := testproc.Start(t, "stopper")
	pid, err := strconv.Atoi(child.Expect("pid", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		child.Send("stop")
		waitStopped(t, pid)
		resumed := monotonic()
		child.Continue()
		after, err := strconv.ParseInt(child.Expect("after", 10*time.Second), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if after < resumed {
			t.Fatalf("stop %d: the caller went on %v before the process was resumed", i, time.Duration(resumed-after))
		}
	}
}

// waitStopped waits until /proc shows process pid stopped.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		if f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:]); len(f) > 0 && string(f[0]) == "T" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not stopped after 10s", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// monotonic reads CLOCK_MONOTONIC, one clock for every process of the
// machine (time.Now's monotonic reading cannot be compared across processes).
func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
