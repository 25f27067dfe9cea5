package scripts_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/localredis"
)

func redisAvailable(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed (apt-get install redis-server)")
		}
		t.Skip("redis-server is not installed (apt-get install redis-server)")
	}
}

// redisUp starts the Redis of root and returns the address env prints.
func redisUp(t *testing.T, root string) string {
	t.Helper()
	if _, errOut, err := script(root, "", nil, "redis.sh", "up"); err != nil {
		t.Fatalf("redis.sh up: %v\n%s", err, errOut)
	}
	return exports(t, mustScript(t, root, "", "redis.sh", "env"))["TEST_REDIS_ADDR"]
}

// TestRedisPassword: the Redis of `up` takes no command without the password
// of .services/redis.password, which env's address carries; a server started
// before passwords is restarted with one.
func TestRedisPassword(t *testing.T) {
	t.Parallel()
	redisAvailable(t)
	root := checkout(t)
	t.Cleanup(func() { script(root, "", nil, "redis.sh", "down", "--purge") })
	addr := redisUp(t, root)
	o, err := localredis.Parse(addr)
	if err != nil {
		t.Fatalf("TEST_REDIS_ADDR=%s: %v", addr, err)
	}
	checkSecret(t, root, "redis", o.Password, os.Getuid())
	ctx := context.Background()
	if err := localredis.Ping(ctx, addr); err != nil {
		t.Fatalf("PING with the password: %v", err)
	}
	if host, _, _ := net.SplitHostPort(o.Addr); host != "127.0.0.1" {
		t.Errorf("listens on %s, want 127.0.0.1", o.Addr)
	}
	if _, err := localredis.Do(ctx, o.Addr, "SET", "k", "v"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("SET without the password: %v, want NOAUTH", err)
	}

	// A server from before: no password, started by the old script.
	mustScript(t, root, "", "redis.sh", "down")
	os.Remove(filepath.Join(root, ".services", "redis.password"))
	dir := filepath.Join(root, ".services", "redis")
	old := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(urlPortOf(t, o.Addr)),
		"--daemonize", "yes", "--pidfile", filepath.Join(dir, "redis.pid"), "--logfile", filepath.Join(dir, "redis.log"),
		"--dir", dir, "--save", "", "--appendonly", "no")
	if out, err := old.CombinedOutput(); err != nil {
		t.Fatalf("an old-style server: %v\n%s", err, out)
	}
	waitPing(t, o.Addr)
	_, errOut, err := script(root, "", nil, "redis.sh", "up")
	if err != nil {
		t.Fatalf("redis.sh up with a server from before passwords: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "before passwords") {
		t.Errorf("up said nothing of the old server:\n%s", errOut)
	}
	again := exports(t, mustScript(t, root, "", "redis.sh", "env"))["TEST_REDIS_ADDR"]
	if err := localredis.Ping(ctx, again); err != nil {
		t.Fatalf("PING after up: %v", err)
	}
	if err := localredis.Ping(ctx, localredis.Addr(again)); err == nil {
		t.Error("after up, the server still answers without a password")
	}
}

func urlPortOf(t *testing.T, hostPort string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostPort)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

func waitPing(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for localredis.Ping(context.Background(), addr) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("nothing answers PING on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRedisPortsTaken: a remembered port that another process listens on
// moves; so does one whose bind fails because another process took it after
// the probe; two checkouts that remember the same port, started at the same
// moment, both come up, each on a port of its own.
func TestRedisPortsTaken(t *testing.T) {
	t.Parallel()
	redisAvailable(t)
	for _, tc := range []struct {
		name string
		hold func(*testing.T) int
	}{
		{"taken before the start", holdListening},
		{"taken meanwhile", holdBound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := checkout(t)
			t.Cleanup(func() { script(root, "", nil, "redis.sh", "down", "--purge") })
			held := tc.hold(t)
			remember(t, root, "redis", map[string]int{"redis": held})
			_, errOut, err := script(root, "", nil, "redis.sh", "up")
			if err != nil {
				t.Fatalf("redis.sh up: %v\n%s", err, errOut)
			}
			if !strings.Contains(errOut, "port "+strconv.Itoa(held)+" of redis") {
				t.Errorf("redis.sh up did not say it moved port %d:\n%s", held, errOut)
			}
			addr := exports(t, mustScript(t, root, "", "redis.sh", "env"))["TEST_REDIS_ADDR"]
			if p := urlPortOf(t, localredis.Addr(addr)); p == held {
				t.Fatalf("TEST_REDIS_ADDR is on port %d, which another process holds", p)
			}
			if err := localredis.Ping(context.Background(), addr); err != nil {
				t.Fatalf("PING %s: %v", localredis.Addr(addr), err)
			}
		})
	}
	t.Run("two checkouts at once", func(t *testing.T) {
		p := freePort(t)
		roots := []string{checkout(t), checkout(t)}
		for _, root := range roots {
			t.Cleanup(func() { script(root, "", nil, "redis.sh", "down", "--purge") })
			remember(t, root, "redis", map[string]int{"redis": p})
		}
		addrs := atOnce(t, roots, "redis.sh", "TEST_REDIS_ADDR")
		if localredis.Addr(addrs[0]) == localredis.Addr(addrs[1]) {
			t.Fatalf("both checkouts say their Redis is on %s", localredis.Addr(addrs[0]))
		}
		for _, a := range addrs {
			if err := localredis.Ping(context.Background(), a); err != nil {
				t.Errorf("PING %s with its own password: %v", localredis.Addr(a), err)
			}
		}
	})
}
