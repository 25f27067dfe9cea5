package scripts_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// holdBound binds a free port of 127.0.0.1 without listening on it and
// without SO_REUSEADDR, and returns it. The scripts' probe sees the port
// free (nothing listens, a connect is refused), yet a server's bind fails:
// exactly what happens when another checkout's server binds the port
// between the probe and the start.
func holdBound(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port
}

// holdListening listens on a free port of 127.0.0.1, as another process's
// server would, and returns it.
func holdListening(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// freePort returns a port nothing listens on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// remember writes the ports a checkout remembers for service, as an
// earlier `up` would have.
func remember(t *testing.T, root, service string, ports map[string]int) {
	t.Helper()
	var b strings.Builder
	for name, p := range ports {
		fmt.Fprintf(&b, "%s=%d\n", name, p)
	}
	f := filepath.Join(root, ".services", service+".ports")
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// rememberedPorts reads what the checkout remembers for service.
func rememberedPorts(t *testing.T, root, service string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".services", service+".ports"))
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, v, _ := strings.Cut(line, "=")
		ports[name], _ = strconv.Atoi(v)
	}
	return ports
}

// checkSecret: the service's password file holds password, belongs to uid
// (the user who ran up) and only that user may read it.
func checkSecret(t *testing.T, root, service, password string, uid int) {
	t.Helper()
	f := filepath.Join(root, ".services", service+".password")
	fi, err := os.Lstat(f)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o600 {
		t.Errorf("%s has mode %v, want -rw-------", f, fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid {
		t.Errorf("%s belongs to uid %d, want %d", f, st.Uid, uid)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); password == "" || got != password {
		t.Errorf("the URL's password is not the one of %s", f)
	}
}

// atOnce runs `name up` in every root at the same moment, then `env`, and
// returns the values of the named exports of each.
func atOnce(t *testing.T, roots []string, name string, exported ...string) []string {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(roots))
	start := make(chan struct{})
	for i, root := range roots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, errOut, err := script(root, "", nil, name, "up"); err != nil {
				errs[i] = fmt.Errorf("%s up in %s: %w\n%s", name, root, err, errOut)
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, root := range roots {
		vars := exports(t, mustScript(t, root, "", name, "env"))
		for _, e := range exported {
			values = append(values, vars[e])
		}
	}
	return values
}

// TestBindFailedReadsALongLog: a server's log that says its bind found the
// port taken, early in a log longer than a pipe's buffer (a Kafka node's
// server.log is about 64 KiB when it gives up), is read as a failed bind
// every time, so that the start moves the port instead of failing. Before
// bind_failed read to the end, grep -q quit at the match, tail died of
// SIGPIPE, and pipefail turned the match into "no match" now and then.
func TestBindFailedReadsALongLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "server.log")
	body := "java.net.BindException: Address already in use\n" + strings.Repeat("x", 1<<20) + "\n"
	if err := os.WriteFile(log, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `set -euo pipefail; root=.; me=test; source lib/service.sh
for i in $(seq 20); do bind_failed "$1" || { echo "run $i: no match"; exit 1; }; done`
	out, err := exec.Command("bash", "-c", script, "bash", log).CombinedOutput()
	if err != nil {
		t.Fatalf("bind_failed missed the taken port: %v: %s", err, out)
	}
}
