// Package scripts_test runs the service scripts the way a newcomer does: from
// a fresh copy of the checkout in a folder only its owner can enter, as the
// user running the test (root in CI), while the default ports are taken by
// someone else. The tests run in parallel: each has checkouts and ports of
// its own.
package scripts_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/localredis"
)

// Default ports of scripts/postgres.sh (main, faults).
var postgresDefaults = []int{55432, 55433}

// checkout copies the scripts into a new folder that only the test's user
// can enter, as a clone in a private home folder is, and returns the copy's
// root.
func checkout(t *testing.T) string {
	t.Helper()
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	return copyScripts(t, private)
}

// copyScripts copies the scripts into private/clone/scripts and returns
// private/clone.
func copyScripts(t *testing.T, private string) string {
	t.Helper()
	root := filepath.Join(private, "clone")
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		copyFile(t, e.Name(), filepath.Join(root, "scripts", e.Name()))
	}
	if _, err := os.Stat("lib"); err == nil {
		if err := os.CopyFS(filepath.Join(root, "scripts", "lib"), os.DirFS("lib")); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	// No fork while the file is open for writing: a child forked by a
	// parallel test would hold the descriptor until its exec, and this
	// test's exec of the file would fail with "text file busy" (ETXTBSY).
	syscall.ForkLock.RLock()
	err = os.WriteFile(to, b, fi.Mode().Perm())
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
}

// occupy makes sure every port is taken while the test runs: by the server
// already there (another checkout's), or else by a listener of the test's.
func occupy(t *testing.T, ports []int) {
	t.Helper()
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken already
		}
		t.Cleanup(func() { l.Close() })
	}
}

// command runs argv as user as (when set; the test then runs as root).
func command(ctx context.Context, as string, argv ...string) *exec.Cmd {
	if as != "" {
		argv = append([]string{"runuser", "-u", as, "--"}, argv...)
	}
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// script runs root/scripts/name with args and the given extra environment,
// as user as when set, and returns its stdout and stderr.
func script(root, as string, env []string, name string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := command(ctx, as, append([]string{filepath.Join(root, "scripts", name)}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

func mustScript(t *testing.T, root, as, name string, args ...string) string {
	t.Helper()
	out, errOut, err := script(root, as, nil, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, errOut)
	}
	return out
}

// exports parses `export NAME='value'` lines as printed by the env command.
func exports(t *testing.T, out string) map[string]string {
	t.Helper()
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, value, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok || !strings.HasPrefix(line, "export ") {
			t.Fatalf("env printed %q, not an export", line)
		}
		// The shell decides what the quoting means.
		unq, err := exec.Command("bash", "-c", `printf %s `+value).Output()
		if err != nil {
			t.Fatalf("env printed %q: %v", line, err)
		}
		vars[name] = string(unq)
	}
	return vars
}

func postgresAvailable(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("initdb"); err == nil {
		return
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) > 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("PostgreSQL's server binaries are not installed")
	}
	t.Skip("PostgreSQL's server binaries are not installed")
}

// server connects to u and returns the port and data folder the server
// itself reports.
func server(t *testing.T, u string) (port int, dataDir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("connect %s: %v", u, err)
	}
	defer conn.Close(ctx)
	var p string
	if err := conn.QueryRow(ctx, "SELECT current_setting('port'), current_setting('data_directory')").Scan(&p, &dataDir); err != nil {
		t.Fatal(err)
	}
	port, err = strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return port, dataDir
}

func urlPort(t *testing.T, u string) int {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(parsed.Port())
	if err != nil {
		t.Fatalf("%s: no port", u)
	}
	return p
}

// TestPostgresPrivateFolderTakenPorts is the newcomer's first step: a clone
// in a folder only its owner can enter (root's home; any mktemp -d folder),
// with another checkout's servers on the default ports. As the test's user
// (root in CI: PostgreSQL then runs as postgres, which cannot enter the
// folder) and, when that is root, as an ordinary user too.
func TestPostgresPrivateFolderTakenPorts(t *testing.T) {
	t.Parallel()
	postgresAvailable(t)
	occupy(t, postgresDefaults)
	t.Run("test's user", func(t *testing.T) { testPostgres(t, checkout(t), "") })
	if os.Getuid() != 0 {
		return
	}
	t.Run("ordinary user", func(t *testing.T) {
		const as = "nobody"
		u, err := user.Lookup(as)
		if err != nil {
			t.Skipf("no user %s: %v", as, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		// Not under t.TempDir: its parent is root's alone.
		private, err := os.MkdirTemp("", "lockfree-scripts-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(private) })
		root := copyScripts(t, private)
		if err := filepath.WalkDir(private, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, uid, gid)
		}); err != nil {
			t.Fatal(err)
		}
		testPostgres(t, root, as)
	})
}

// testPostgres runs the copy root's postgres.sh as user as (the test's own
// when empty): up, env, a restart through the fault tests' control command,
// down --purge.
func testPostgres(t *testing.T, root, as string) {
	t.Cleanup(func() {
		if _, errOut, err := script(root, as, nil, "postgres.sh", "down", "--purge"); err != nil {
			t.Errorf("postgres.sh down --purge: %v\n%s", err, errOut)
		}
	})

	mustScript(t, root, as, "postgres.sh", "up")
	vars := exports(t, mustScript(t, root, as, "postgres.sh", "env"))
	var dataDirs []string
	for _, name := range []string{"TEST_DATABASE_URL", "TEST_FAULT_DATABASE_URL"} {
		u := vars[name]
		if u == "" {
			t.Fatalf("env printed no %s:\n%v", name, vars)
		}
		want := urlPort(t, u)
		for _, p := range postgresDefaults {
			if want == p {
				t.Fatalf("%s=%s uses default port %d, which another server holds", name, u, p)
			}
		}
		port, dataDir := server(t, u)
		if port != want {
			t.Errorf("%s=%s reaches a server on port %d", name, u, port)
		}
		if !filepath.IsAbs(dataDir) {
			t.Errorf("data_directory %q", dataDir)
		}
		dataDirs = append(dataDirs, dataDir)
	}
	if dataDirs[0] == dataDirs[1] {
		t.Fatalf("both URLs reach the server of %s", dataDirs[0])
	}

	t.Run("password", func(t *testing.T) { testPostgresAuth(t, root, as, vars) })
	t.Run("trust cluster migrated", func(t *testing.T) { testPostgresTrustMigrated(t, root, as, vars, dataDirs) })

	// up is idempotent and env agrees with the running servers.
	mustScript(t, root, as, "postgres.sh", "up")
	if again := exports(t, mustScript(t, root, as, "postgres.sh", "env")); again["TEST_DATABASE_URL"] != vars["TEST_DATABASE_URL"] {
		t.Errorf("second up moved the server: %s, then %s", vars["TEST_DATABASE_URL"], again["TEST_DATABASE_URL"])
	}

	// The fault tests' control command restarts the copy's fault server.
	ctl := vars["TEST_FAULT_POSTGRES_CTL"]
	if out, err := command(context.Background(), as, "bash", "-c", ctl+" restart").CombinedOutput(); err != nil {
		t.Fatalf("%s restart: %v\n%s", ctl, err, out)
	}
	if port, _ := server(t, vars["TEST_FAULT_DATABASE_URL"]); port != urlPort(t, vars["TEST_FAULT_DATABASE_URL"]) {
		t.Errorf("after restart the fault server is on port %d", port)
	}

	// A cluster made before ports were remembered: its port is in its config.
	faultsPort := urlPort(t, vars["TEST_FAULT_DATABASE_URL"])
	if out, err := command(context.Background(), as, "bash", "-c", ctl+" stop").CombinedOutput(); err != nil {
		t.Fatalf("%s stop: %v\n%s", ctl, err, out)
	}
	if err := os.Remove(filepath.Join(root, ".services", "postgres.ports")); err != nil {
		t.Fatal(err)
	}
	conf, err := os.OpenFile(filepath.Join(dataDirs[1], "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conf.WriteString("port = " + strconv.Itoa(faultsPort) + "\n"); err != nil {
		t.Fatal(err)
	}
	conf.Close()
	if out, err := command(context.Background(), as, "bash", "-c", ctl+" start").CombinedOutput(); err != nil {
		t.Fatalf("%s start of a cluster without remembered port: %v\n%s", ctl, err, out)
	}
	if port, _ := server(t, vars["TEST_FAULT_DATABASE_URL"]); port != faultsPort {
		t.Errorf("the fault server came back on port %d, not %d", port, faultsPort)
	}

	mustScript(t, root, as, "postgres.sh", "down", "--purge")
	for _, d := range dataDirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("down --purge left %s (%v)", d, err)
		}
	}
	for _, name := range []string{"TEST_DATABASE_URL", "TEST_FAULT_DATABASE_URL"} {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(urlPort(t, vars[name])))
		if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
			c.Close()
			t.Errorf("after down, %s still answers", addr)
		}
	}
}

// TestRedis: the Redis server of a private copy, with the default port taken,
// answers PING where env says (with the password env's address carries), and
// is gone after down --purge.
func TestRedis(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed (apt-get install redis-server)")
		}
		t.Skip("redis-server is not installed (apt-get install redis-server)")
	}
	occupy(t, []int{56379})
	root := checkout(t)
	t.Cleanup(func() {
		if _, errOut, err := script(root, "", nil, "redis.sh", "down", "--purge"); err != nil {
			t.Errorf("redis.sh down --purge: %v\n%s", err, errOut)
		}
	})
	mustScript(t, root, "", "redis.sh", "up")
	addr := exports(t, mustScript(t, root, "", "redis.sh", "env"))["TEST_REDIS_ADDR"]
	if addr == "" || strings.HasSuffix(addr, ":56379") {
		t.Fatalf("TEST_REDIS_ADDR=%q: want the copy's own port, 56379 is taken", addr)
	}
	if err := localredis.Ping(context.Background(), addr); err != nil {
		t.Fatalf("PING %s: %v", localredis.Addr(addr), err)
	}
	mustScript(t, root, "", "redis.sh", "down", "--purge")
	if c, err := net.DialTimeout("tcp", localredis.Addr(addr), 5*time.Second); err == nil {
		c.Close()
		t.Errorf("after down, %s still answers", localredis.Addr(addr))
	}
}

// TestMissingPrerequisite: a missing server program is one line that names
// the package to install, not a stack of errors.
func TestMissingPrerequisite(t *testing.T) {
	t.Parallel()
	root := checkout(t)
	empty := t.TempDir()
	for _, tc := range []struct {
		script string
		env    []string
		pkg    string
	}{
		{"postgres.sh", []string{"PG_BINDIR=" + empty}, "apt-get install postgresql"},
		{"kafka.sh", []string{"JAVA_HOME=" + empty}, "apt-get install openjdk-17-jre-headless"},
		{"redis.sh", []string{"REDIS_SERVER=" + filepath.Join(empty, "redis-server")}, "apt-get install redis-server"},
	} {
		t.Run(tc.script, func(t *testing.T) {
			_, errOut, err := script(root, "", tc.env, tc.script, "up")
			if err == nil {
				t.Fatalf("%s up succeeded with %v", tc.script, tc.env)
			}
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.pkg) {
				t.Errorf("%s up with %v printed\n%s\nwant one line naming %q", tc.script, tc.env, errOut, tc.pkg)
			}
		})
	}
}
