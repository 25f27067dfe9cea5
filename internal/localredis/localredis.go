// Package localredis starts a throwaway Redis server from the machine's own
// redis-server (PATH, or REDIS_SERVER): a free loopback port, nothing kept on
// disk. It backs `lockfree compare`'s redis-lock approaches when no Redis is
// given, as localpg backs its PostgreSQL.
package localredis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrNoBinary reports that no redis-server was found.
var ErrNoBinary = errors.New("localredis: no redis-server on PATH (apt-get install redis-server) or in REDIS_SERVER")

// Server is a running throwaway server. Stop is safe to call more than once;
// the other fields never change.
type Server struct {
	// Addr is the server's address, 127.0.0.1:port.
	Addr string

	cmd      *exec.Cmd
	out      *bytes.Buffer // the server's log
	exited   chan struct{}
	stopOnce sync.Once
}

func findBin() (string, error) {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("%w: REDIS_SERVER=%s: %v", ErrNoBinary, p, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", ErrNoBinary
	}
	return p, nil
}

// Available reports whether Start can find redis-server.
func Available() bool {
	_, err := findBin()
	return err == nil
}

// Start starts a server on a free loopback port and waits until it answers
// PING; Stop stops it. The server exits with ctx too.
func Start(ctx context.Context) (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	var last error
	// A free port can be taken between our probe and the server's bind:
	// try another.
	for range 3 {
		s, err := start(ctx, bin)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

func start(ctx context.Context, bin string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), out: &bytes.Buffer{}, exited: make(chan struct{})}
	// Loopback only, no RDB or AOF file, no working directory of its own
	// to leave behind (it writes nothing there without them).
	s.cmd = exec.CommandContext(ctx, bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", os.TempDir(), "--daemonize", "no", "--logfile", "")
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("localredis: starting %s: %w", bin, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(ctx, 10*time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("localredis: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady waits until the server answers PING, or exits.
func (s *Server) waitReady(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if err := Ping(ctx, s.Addr); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("localredis: redis-server did not answer on %s: %w\n%s", s.Addr, err, s.out)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("localredis: redis-server exited: %s", strings.TrimSpace(s.out.String()))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Ping reports whether the Redis server at addr answers PING, in Redis's
// inline protocol, within a second: nil when it answers +PONG.
func Ping(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 7)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if got := string(buf[:n]); got != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", got)
	}
	return nil
}

// Stop stops the server and waits for it to exit.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
	})
}

// Resolve returns the Redis server of `lockfree compare`'s redis-lock
// approaches: addr when one is given (--redis), else a throwaway server when
// redis-server is installed, which stop stops. It returns "" when there is
// none, saying why on log: the approaches are then reported as skipped,
// with the reason, and the others run.
func Resolve(ctx context.Context, addr string, log io.Writer) (_ string, stop func()) {
	stop = func() {}
	if addr != "" {
		return addr, stop
	}
	if !Available() {
		fmt.Fprintln(log, "lockfree: no Redis given and no redis-server found (apt-get install redis-server): redis-lock is skipped")
		return "", stop
	}
	s, err := Start(ctx)
	if err != nil {
		fmt.Fprintf(log, "lockfree: a throwaway Redis did not start: %v: redis-lock is skipped\n", err)
		return "", stop
	}
	fmt.Fprintf(log, "lockfree: no Redis given: started a throwaway redis-server on %s\n", s.Addr)
	return s.Addr, s.Stop
}
