package localredis_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/localredis"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// A throwaway server answers on loopback, keeps what it is told, and is gone
// after Stop.
func TestStartStop(t *testing.T) {
	if !localredis.Available() {
		testdb.Missing(t, "redis-server", "not on PATH")
	}
	ctx := context.Background()
	s, err := localredis.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	host, _, err := net.SplitHostPort(s.Addr)
	if err != nil || host != "127.0.0.1" {
		t.Errorf("address %s, want 127.0.0.1:port (%v)", s.Addr, err)
	}
	if got := exchange(t, s.Addr, "SET k v\r\nGET k\r\n", len("+OK\r\n$1\r\nv\r\n")); got != "+OK\r\n$1\r\nv\r\n" {
		t.Fatalf("SET k v, GET k answered %q", got)
	}
	if err := localredis.Ping(ctx, s.Addr); err != nil {
		t.Errorf("Ping: %v", err)
	}
	s.Stop()
	s.Stop() // twice is fine
	if err := localredis.Ping(ctx, s.Addr); err == nil {
		t.Error("the server still answers after Stop")
	}
}

// Without redis-server, Start says so.
func TestNoBinary(t *testing.T) {
	t.Setenv("REDIS_SERVER", "/nonexistent/redis-server")
	if localredis.Available() {
		t.Fatal("Available with REDIS_SERVER pointing nowhere")
	}
	if _, err := localredis.Start(context.Background()); !errors.Is(err, localredis.ErrNoBinary) {
		t.Fatalf("Start without a binary: %v, want ErrNoBinary", err)
	}
}

// Resolve keeps a given address, else starts a server, else says why there
// is none.
func TestResolve(t *testing.T) {
	ctx := context.Background()
	var log strings.Builder
	if addr, stop := localredis.Resolve(ctx, "10.0.0.1:6379", &log); addr != "10.0.0.1:6379" || log.Len() != 0 {
		t.Errorf("given an address: %q, log %q", addr, log.String())
	} else {
		stop()
	}
	if localredis.Available() {
		addr, stop := localredis.Resolve(ctx, "", &log)
		if err := localredis.Ping(ctx, addr); err != nil {
			t.Errorf("the throwaway server at %q: %v", addr, err)
		}
		stop()
	}
	t.Setenv("REDIS_SERVER", "/nonexistent/redis-server")
	log.Reset()
	if addr, stop := localredis.Resolve(ctx, "", &log); addr != "" || !strings.Contains(log.String(), "redis-lock is skipped") {
		t.Errorf("without redis-server: %q, log %q", addr, log.String())
	} else {
		stop()
	}
}

// exchange sends inline commands to the server at addr and returns the
// first n bytes of its answers.
func exchange(t *testing.T, addr, commands string, n int) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(commands)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("reading the answers: %v (got %q)", err, buf)
	}
	return string(buf)
}
