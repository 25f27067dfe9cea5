package testrepl

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// cluster is the binary's pair and what the test holding it changed, so
// that the next Get knows what to undo.
type cluster struct {
	mu sync.Mutex // held by the test that has the pair
	t  testing.TB // that test, for the script's messages

	script, dir string
	ports       [3]int // by Node
	primary     Node

	promoted bool // the standby was promoted: the other node must be rebuilt
	held     bool // the standby's WAL receiver is stopped
	sync     bool // synchronous replication is on
	down     [3]bool
	isolated [3]bool
}

func (c *cluster) port(n Node) int { return c.ports[n] }

// missingError is a prerequisite this machine lacks: the test skips (or
// fails under CI=true) rather than erroring.
type missingError struct{ why string }

func (e *missingError) Error() string { return e.why }

var (
	once      sync.Once
	shared    *cluster
	sharedErr error
)

func theCluster() (*cluster, error) {
	once.Do(func() { shared, sharedErr = newCluster() })
	return shared, sharedErr
}

// Main runs the tests of a binary that uses Get, then removes its pair.
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if err := shared.remove(); err != nil {
			fmt.Fprintf(os.Stderr, "testrepl: removing the replication pair: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// ownerFile holds the pid of the test binary whose pair a folder holds.
const ownerFile = "owner.pid"

func newCluster() (*cluster, error) {
	if _, err := exec.LookPath("bash"); err != nil {
		return nil, &missingError{"bash not found"}
	}
	if !haveServerBinaries() {
		return nil, &missingError{"PostgreSQL's initdb, pg_ctl and pg_basebackup not found (apt-get install postgresql)"}
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	c := &cluster{script: filepath.Join(root, "scripts", "pg-replication.sh")}
	if _, err := os.Stat(c.script); err != nil {
		return nil, err
	}
	c.sweep()
	// A port found free can be taken before the server binds it: try again
	// on others.
	for attempt := 1; ; attempt++ {
		err := c.make()
		if err == nil || attempt == 3 {
			return c, err
		}
		if rmErr := c.remove(); rmErr != nil {
			return c, fmt.Errorf("%w; removing the pair after it: %w", err, rmErr)
		}
	}
}

// haveServerBinaries looks where scripts/lib/pg.sh looks.
func haveServerBinaries() bool {
	if dir := os.Getenv("PG_BINDIR"); dir != "" {
		_, err := os.Stat(filepath.Join(dir, "pg_basebackup"))
		return err == nil
	}
	if _, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_basebackup"); err == nil {
			return true
		}
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_basebackup")
	return len(found) > 0
}

// sweep removes the pairs of test binaries that died without their Main
// running to the end (a timeout, a kill): their servers would hold ports and
// memory for nothing.
func (c *cluster) sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "lockfree-repl-*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || alive(pid) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
		run(ctx, c.script, dir, nil, "down", "--purge")
		cancel()
		os.RemoveAll(dir)
	}
}

// make starts a new pair in a new folder on free ports; node1 is the primary.
func (c *cluster) make() error {
	dir, err := os.MkdirTemp("", "lockfree-repl-")
	if err != nil {
		return err
	}
	c.dir = dir
	// As root the servers run as postgres, which must reach the data inside.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	env := []string{"REPL_PORT1=" + strconv.Itoa(ports[0]), "REPL_PORT2=" + strconv.Itoa(ports[1])}
	if err := c.run(env, "up", "async"); err != nil {
		return err
	}
	c.ports = [3]int{0, ports[0], ports[1]}
	c.primary = 1
	c.promoted, c.held, c.sync = false, false, false
	c.down, c.isolated = [3]bool{}, [3]bool{}
	return nil
}

// remove stops the pair's servers and deletes its folder.
func (c *cluster) remove() error {
	err := c.run(nil, "down", "--purge")
	if rmErr := os.RemoveAll(c.dir); err == nil {
		err = rmErr
	}
	return err
}

// remake replaces a pair that restore could not bring back.
func (c *cluster) remake() error {
	if err := c.remove(); err != nil {
		c.logf("testrepl: removing the old pair: %v", err)
	}
	return c.make()
}

// restore undoes what the previous test did: every node up and open, the
// standby streaming from the primary, replication asynchronous.
func (c *cluster) restore() error {
	other := c.primary.Other()
	steps := [][]string{}
	for _, n := range []Node{1, 2} {
		rebuilt := c.promoted && n == other // rebuild replaces data and settings
		if c.down[n] && !rebuilt {
			steps = append(steps, []string{"start", n.arg()})
		}
		if c.isolated[n] && !rebuilt {
			steps = append(steps, []string{"heal", n.arg()})
		}
	}
	switch {
	case c.promoted:
		steps = append(steps, []string{"rebuild", other.arg()})
	case c.held && !c.isolated[other]: // heal restarts the receiver of an isolated standby
		steps = append(steps, []string{"receiver-start", other.arg()})
	}
	if c.sync {
		steps = append(steps, []string{"mode", "async"})
	}
	for _, s := range steps {
		if err := c.run(nil, s...); err != nil {
			return err
		}
	}
	c.promoted, c.held, c.sync = false, false, false
	c.down, c.isolated = [3]bool{}, [3]bool{}
	return nil
}

func (n Node) arg() string { return strconv.Itoa(int(n)) }

// run runs one step of the script and logs what it said.
func (c *cluster) run(env []string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	start := time.Now()
	out, err := run(ctx, c.script, c.dir, env, args...)
	if err != nil {
		return fmt.Errorf("pg-replication.sh %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	c.logf("pg-replication.sh %s (%.1f s)\n%s", strings.Join(args, " "), time.Since(start).Seconds(), out)
	return nil
}

// logf logs to the test holding the pair, if any (Main removes the pair
// after every test has ended).
func (c *cluster) logf(format string, args ...any) {
	if c.t == nil {
		return
	}
	c.t.Helper()
	c.t.Logf(format, args...)
}
