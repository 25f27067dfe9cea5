// Package testproc runs parts of a test in a child process — the test binary
// re-executed — so that a test can pause it for real with SIGSTOP, resume it
// with SIGCONT, or kill it, and watch what it does when it wakes.
//
// A test package registers its child programs and calls Main from TestMain:
//
//	func TestMain(m *testing.M) { testproc.Main(m, map[string]testproc.Program{"writer": writer}) }
//
// A child talks to its test through lines: it reads commands on stdin and
// writes results on stdout.
package testproc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

const envChild = "LOCKFREE_TEST_CHILD"

// Program is a child's body: it reads commands from in and reports on out.
// Returning an error exits the child with status 1.
type Program func(in *bufio.Scanner, out io.Writer) error

// Main runs the registered program when this process is a child, and
// otherwise runs the tests with a goroutine-leak check.
func Main(m *testing.M, programs map[string]Program) {
	if name := os.Getenv(envChild); name != "" {
		prog, ok := programs[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "testproc: no child program %q\n", name)
			os.Exit(2)
		}
		if err := prog(bufio.NewScanner(os.Stdin), os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "testproc: %s: %v\n", name, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		// pgx's pools close their background health checks asynchronously.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// Child is a running child process.
type Child struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan error
}

// Start runs the program name in a child process with env added to this
// process's environment. The child is killed when the test ends.
func Start(t testing.TB, name string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), envChild+"="+name), env...)
	cmd.Stderr = &logWriter{t: t, prefix: name + ": "}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &Child{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 64), done: make(chan error, 1)}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			c.lines <- s.Text()
		}
		close(c.lines)
	}()
	go func() { c.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		c.done <- <-c.done // leave the exit status for a later Wait
	})
	return c
}

// Expect waits up to timeout for the next line starting with prefix, and
// returns the rest of it, trimmed. Other lines are logged and skipped.
func (c *Child) Expect(prefix string, timeout time.Duration) string {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				c.t.Fatalf("testproc: child exited while waiting for %q", prefix)
			}
			if rest, found := strings.CutPrefix(line, prefix); found {
				return strings.TrimSpace(rest)
			}
			c.t.Logf("child: %s", line)
		case <-deadline:
			c.t.Fatalf("testproc: no %q from the child within %v", prefix, timeout)
		}
	}
}

// Send writes a command line to the child's stdin. It does not wait: a
// stopped child reads it when it is resumed.
func (c *Child) Send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		c.t.Fatalf("testproc: send %q: %v", line, err)
	}
}

// Stop pauses the child with SIGSTOP.
func (c *Child) Stop() { c.signal(syscall.SIGSTOP) }

// Continue resumes the child with SIGCONT.
func (c *Child) Continue() { c.signal(syscall.SIGCONT) }

// Kill kills the child with SIGKILL and waits for it to exit.
func (c *Child) Kill() {
	c.t.Helper()
	c.signal(syscall.SIGKILL)
	c.done <- <-c.done // leave the exit status for a later Wait
}

// Wait waits up to timeout for the child to exit and returns its error.
func (c *Child) Wait(timeout time.Duration) error {
	c.t.Helper()
	select {
	case err := <-c.done:
		c.done <- err
		return err
	case <-time.After(timeout):
		c.t.Fatalf("testproc: child still running after %v", timeout)
		return nil
	}
}

func (c *Child) signal(sig syscall.Signal) {
	c.t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("testproc: signal %v: %v", sig, err)
	}
}

type logWriter struct {
	t      testing.TB
	prefix string
}

func (w *logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + line)
	}
	return len(p), nil
}
