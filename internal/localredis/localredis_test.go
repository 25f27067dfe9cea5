package localredis_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/lockfree-go/lockfree/internal/localredis"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// A throwaway server answers on loopback, to its password only, keeps what
// it is told, and is gone after Stop.
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
	// Another local account knows the port, not the password.
	if _, err := localredis.Do(ctx, s.Addr, "SET", "k", "stranger"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("SET without the password: %v, want NOAUTH", err)
	}
	if err := localredis.Ping(ctx, s.Addr); err == nil {
		t.Error("Ping without the password succeeded")
	}
	e, err := localredis.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if e.Addr != s.Addr || e.Password == "" {
		t.Errorf("Parse(URL) = %s with password %v, want %s with one", e.Addr, e.Password != "", s.Addr)
	}
	if _, err := localredis.Do(ctx, s.URL, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if v, err := localredis.Do(ctx, s.URL, "GET", "k"); err != nil || v != "v" {
		t.Fatalf("GET k = %q, %v", v, err)
	}
	if err := localredis.Ping(ctx, s.URL); err != nil {
		t.Errorf("Ping: %v", err)
	}
	s.Stop()
	s.Stop() // twice is fine
	if err := localredis.Ping(ctx, s.URL); err == nil {
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

// Parse and Addr read host:port and redis:// URLs; Addr never shows the
// password, and neither does a bad URL's error.
func TestParseAddr(t *testing.T) {
	for _, tc := range []struct{ in, addr, user, password string }{
		{"127.0.0.1:6379", "127.0.0.1:6379", "", ""},
		{"redis://:s3cret@127.0.0.1:56379", "127.0.0.1:56379", "", "s3cret"},
		{"redis://app:s3cret@[::1]:7000/2", "[::1]:7000", "app", "s3cret"},
	} {
		e, err := localredis.Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if e.Addr != tc.addr || e.Username != tc.user || e.Password != tc.password {
			t.Errorf("Parse(%q) = %s %q %q, want %s %q %q", tc.in, e.Addr, e.Username, e.Password, tc.addr, tc.user, tc.password)
		}
		if got := localredis.Addr(tc.in); got != tc.addr || strings.Contains(got, "s3cret") {
			t.Errorf("Addr(%q) = %q, want %q", tc.in, got, tc.addr)
		}
	}
	for _, bad := range []string{"nohost", "redis://:s3cret@127.0.0.1:notaport", "rediss://:s3cret@127.0.0.1:1", "redis://:s3cret@127.0.0.1:1/x"} {
		if _, err := localredis.Parse(bad); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Parse(%q): %v, want an error without the password", bad, err)
		}
	}
}
