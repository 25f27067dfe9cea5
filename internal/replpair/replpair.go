// Package replpair runs a PostgreSQL primary with a streaming standby on this
// machine, made by scripts/pg-replication.sh in a temporary folder and on
// free ports, and takes it through a failover one step at a time: hold the
// standby's WAL receiver, kill or isolate the primary, promote the standby,
// and bring the pair back (the old primary rebuilt as the new one's
// standby). It is the repository's one primary/standby helper: the lab's
// failover fault takes steps on a Pair of its own (Start), and a test takes
// its turn on its binary's shared pair with Get, which hands it over
// healthy, in a schema of the test's own (test.go).
//
// A pair needs bash, the script (found above the working directory, or at
// $LOCKFREE_REPL_SCRIPT) and PostgreSQL's server programs (initdb, pg_ctl,
// pg_basebackup: PATH, PG_BINDIR or Debian's /usr/lib/postgresql). Without
// them Start returns a *MissingError.
//
// The nodes take scram-sha-256 logins only; the superuser's password is the
// random one the script keeps in the pair's folder, and the URLs carry it.
package replpair

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Node names one server of the pair: 1 or 2. Which one is the primary
// changes with every promotion.
type Node int

// Other returns the pair's other node.
func (n Node) Other() Node { return 3 - n }

func (n Node) String() string { return "node" + strconv.Itoa(int(n)) }

func (n Node) arg() string { return strconv.Itoa(int(n)) }

// MissingError is a prerequisite this machine lacks (bash, the script,
// PostgreSQL's server programs): a test skips on it rather than failing,
// except under CI=true.
type MissingError struct{ Why string }

func (e *MissingError) Error() string { return "replpair: " + e.Why }

// StepTimeout bounds one step of the script; its own waits give up after 60 s.
const StepTimeout = 3 * time.Minute

// Pair is a primary with its standby, and what was done to it since it was
// last healthy, so that Restore knows what to undo. Its methods are not
// safe for concurrent use.
type Pair struct {
	// Logf, when set, receives what each step of the script said.
	Logf func(format string, args ...any)

	script, dir string
	password    string // of the superuser postgres, from the script's env
	ports       [3]int // by Node
	primary     Node

	promoted bool // the standby was promoted: the other node must be rebuilt
	held     bool // the standby's WAL receiver is stopped
	sync     bool // synchronous replication is on
	down     [3]bool
	isolated [3]bool
}

// ownerFile holds the pid of the process whose pair a folder holds.
const ownerFile = "owner.pid"

// Start makes a new pair, node1 the primary, replication asynchronous.
// Remove removes it; a later Start removes the pairs of processes that died
// without removing theirs.
func Start(ctx context.Context) (*Pair, error) {
	script, err := findScript()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("bash"); err != nil {
		return nil, &MissingError{"bash not found"}
	}
	if !haveServerBinaries() {
		return nil, &MissingError{"PostgreSQL's initdb, pg_ctl and pg_basebackup not found (apt-get install postgresql)"}
	}
	p := &Pair{script: script}
	p.sweep(ctx)
	// A port found free can be taken before the server binds it: try again
	// on others.
	for attempt := 1; ; attempt++ {
		err := p.make(ctx)
		if err == nil || attempt == 3 {
			return p, err
		}
		if rmErr := p.Remove(ctx); rmErr != nil {
			return p, fmt.Errorf("%w; removing the pair after it: %w", err, rmErr)
		}
	}
}

// findScript returns scripts/pg-replication.sh: $LOCKFREE_REPL_SCRIPT, or
// the one in the nearest folder above the working directory that has it
// (the repository's root, above the lab's and the examples' modules).
func findScript() (string, error) {
	if s := os.Getenv("LOCKFREE_REPL_SCRIPT"); s != "" {
		return s, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		s := filepath.Join(dir, "scripts", "pg-replication.sh")
		if _, err := os.Stat(s); err == nil {
			return s, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", &MissingError{"scripts/pg-replication.sh not found above the working directory (run from a checkout of lockfree, or set LOCKFREE_REPL_SCRIPT)"}
		}
		dir = parent
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

// sweep removes the pairs of processes that died without removing theirs (a
// timeout, a kill): their servers would hold ports and memory for nothing.
func (p *Pair) sweep(ctx context.Context) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "lockfree-repl-*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || alive(pid) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, StepTimeout)
		run(sctx, p.script, dir, nil, "down", "--purge")
		cancel()
		os.RemoveAll(dir)
	}
}

// make starts a new pair in a new folder on free ports; node1 is the primary.
func (p *Pair) make(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "lockfree-repl-")
	if err != nil {
		return err
	}
	p.dir = dir
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
	if err := p.run(ctx, env, "up", "async"); err != nil {
		return err
	}
	if p.password, err = p.envPassword(ctx); err != nil {
		return err
	}
	p.ports = [3]int{0, ports[0], ports[1]}
	p.primary = 1
	p.promoted, p.held, p.sync = false, false, false
	p.down, p.isolated = [3]bool{}, [3]bool{}
	return nil
}

// envPassword reads the superuser's password from the URLs the script's env
// prints.
func (p *Pair) envPassword(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, StepTimeout)
	defer cancel()
	out, err := run(ctx, p.script, p.dir, nil, "env")
	if err != nil {
		return "", fmt.Errorf("replpair: pg-replication.sh env: %w\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		v, ok := strings.CutPrefix(line, "export TEST_REPL_NODE1_URL=")
		if !ok {
			continue
		}
		u, err := url.Parse(strings.Trim(v, "'"))
		if err != nil {
			return "", fmt.Errorf("replpair: pg-replication.sh env printed a URL that does not parse")
		}
		if pw, ok := u.User.Password(); ok && pw != "" {
			return pw, nil
		}
	}
	return "", errors.New("replpair: pg-replication.sh env printed no URL with a password")
}

// Remove stops the pair's servers and deletes its folder.
func (p *Pair) Remove(ctx context.Context) error {
	err := p.run(ctx, nil, "down", "--purge")
	if rmErr := os.RemoveAll(p.dir); err == nil {
		err = rmErr
	}
	return err
}

// Remake replaces a pair that Restore could not bring back.
func (p *Pair) Remake(ctx context.Context) error {
	if err := p.Remove(ctx); err != nil {
		p.logf("replpair: removing the old pair: %v", err)
	}
	return p.make(ctx)
}

// Restore undoes what was done to the pair: every node up and open, the
// standby streaming from the primary (after a promotion, the old primary
// rebuilt from the new one), replication asynchronous.
func (p *Pair) Restore(ctx context.Context) error {
	other := p.primary.Other()
	var steps [][]string
	for _, n := range []Node{1, 2} {
		rebuilt := p.promoted && n == other // rebuild replaces data and settings
		if p.down[n] && !rebuilt {
			steps = append(steps, []string{"start", n.arg()})
		}
		if p.isolated[n] && !rebuilt {
			steps = append(steps, []string{"heal", n.arg()})
		}
	}
	switch {
	case p.promoted:
		steps = append(steps, []string{"rebuild", other.arg()})
	case p.held && !p.isolated[other]: // heal restarts the receiver of an isolated standby
		steps = append(steps, []string{"receiver-start", other.arg()})
	}
	if p.sync {
		steps = append(steps, []string{"mode", "async"})
	}
	for _, s := range steps {
		if err := p.run(ctx, nil, s...); err != nil {
			return err
		}
	}
	p.promoted, p.held, p.sync = false, false, false
	p.down, p.isolated = [3]bool{}, [3]bool{}
	return nil
}

// run runs one step of the script and logs what it said.
func (p *Pair) run(ctx context.Context, env []string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, StepTimeout)
	defer cancel()
	start := time.Now()
	out, err := run(ctx, p.script, p.dir, env, args...)
	if err != nil {
		return fmt.Errorf("replpair: pg-replication.sh %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	p.logf("pg-replication.sh %s (%.1f s)\n%s", strings.Join(args, " "), time.Since(start).Seconds(), out)
	return nil
}

func (p *Pair) logf(format string, args ...any) {
	if p.Logf != nil {
		p.Logf(format, args...)
	}
}

// freePorts returns n ports that nothing listened on a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// alive reports whether process pid exists.
func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// run runs the script with args and returns its combined output.
func run(ctx context.Context, script, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Env = append(append(os.Environ(), "REPL_DIR="+dir), env...)
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// IsMissing reports whether err is a prerequisite this machine lacks.
func IsMissing(err error) (string, bool) {
	var m *MissingError
	if errors.As(err, &m) {
		return m.Why, true
	}
	return "", false
}
