// Package localredis starts a throwaway Redis server from the machine's own
// redis-server (PATH, or REDIS_SERVER): a free loopback port, a random
// password (requirepass) that only [Server.URL] carries, nothing kept on
// disk. It backs `lockfree compare`'s redis-lock approaches when no Redis is
// given, as localpg backs its PostgreSQL.
//
// A Redis address, wherever lockfree takes one (--redis, REDIS_ADDR,
// TEST_REDIS_ADDR), is host:port or a URL redis://[[user]:password@]host:port[/db];
// [Parse] reads both, [Addr] gives the part to show.
package localredis

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
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
	// Addr is the server's address, 127.0.0.1:port. It takes no command
	// without the password: connect with URL.
	Addr string
	// URL is redis://:password@127.0.0.1:port, for [Parse].
	URL string

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
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("localredis: a password: %w", err)
	}
	password := hex.EncodeToString(b)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := &Server{Addr: addr, URL: "redis://:" + password + "@" + addr, out: &bytes.Buffer{}, exited: make(chan struct{})}
	// The config comes on stdin ("-"), so that the password is in no file
	// and on no command line. Loopback only, no RDB or AOF file, no working
	// directory of its own to leave behind (it writes nothing there without
	// them).
	s.cmd = exec.CommandContext(ctx, bin, "-")
	s.cmd.Stdin = strings.NewReader(fmt.Sprintf("bind 127.0.0.1\nport %d\nrequirepass %s\nsave \"\"\nappendonly no\n"+
		"dir %q\ndaemonize no\nlogfile \"\"\n", port, password, os.TempDir()))
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
		if err := Ping(ctx, s.URL); err == nil {
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

// Endpoint is a Redis address taken apart: where to dial, and whom to
// AUTH as. A client library's options are made from it (the lab's
// approaches, the examples): this package depends on none.
type Endpoint struct {
	// Addr is host:port.
	Addr string
	// Username and Password are the AUTH's; both empty for none.
	Username, Password string
	// DB is the database number, 0 unless the URL names one.
	DB int
}

// Parse reads a Redis address: host:port, or a URL
// redis://[[user]:password@]host:port[/db]. Its errors never quote the
// password.
func Parse(addr string) (Endpoint, error) {
	if !strings.Contains(addr, "://") {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return Endpoint{}, fmt.Errorf("localredis: Redis address %q: want host:port or redis://[:password@]host:port", addr)
		}
		return Endpoint{Addr: addr}, nil
	}
	bad := fmt.Errorf("localredis: Redis address %s: not a valid redis:// URL", Addr(addr))
	u, err := url.Parse(addr)
	if err != nil || u.Scheme != "redis" || u.Opaque != "" || u.RawQuery != "" || u.Fragment != "" {
		return Endpoint{}, bad // url's error may quote the URL, password included
	}
	if _, port, err := net.SplitHostPort(u.Host); err != nil || port == "" {
		return Endpoint{}, bad
	} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return Endpoint{}, bad
	}
	e := Endpoint{Addr: u.Host}
	if u.User != nil {
		e.Username = u.User.Username()
		e.Password, _ = u.User.Password()
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		if e.DB, err = strconv.Atoi(db); err != nil || e.DB < 0 {
			return Endpoint{}, bad
		}
	}
	return e, nil
}

// Addr returns the host:port of a Redis address, without user or password:
// the part messages may show.
func Addr(addr string) string {
	if _, rest, ok := strings.Cut(addr, "://"); ok {
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			rest = rest[i+1:]
		}
		addr, _, _ = strings.Cut(rest, "/")
	}
	return addr
}

// Ping reports whether the Redis server at addr (host:port or a URL)
// answers PING within a second, after AUTH when addr has a password: nil
// when it answers +PONG.
func Ping(ctx context.Context, addr string) error {
	reply, err := Do(ctx, addr, "PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("answered %q", reply)
	}
	return nil
}

// Do sends one command to the Redis server at addr (host:port or a URL),
// after AUTH when addr has a password, within a second, and returns its
// reply: a simple string, an integer or a bulk string, as text ("" for a
// null). An error reply ("-NOAUTH …") is an error.
func Do(ctx context.Context, addr string, args ...string) (string, error) {
	e, err := Parse(addr)
	if err != nil {
		return "", err
	}
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", e.Addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	r := bufio.NewReader(c)
	if e.Password != "" {
		auth := []string{"AUTH", e.Password}
		if e.Username != "" {
			auth = []string{"AUTH", e.Username, e.Password}
		}
		if _, err := command(c, r, auth...); err != nil {
			return "", fmt.Errorf("AUTH: %w", err)
		}
	}
	return command(c, r, args...)
}

// command sends one command in RESP and reads its reply.
func command(w io.Writer, r *bufio.Reader, args ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "+"), strings.HasPrefix(line, ":"):
		return line[1:], nil
	case strings.HasPrefix(line, "-"):
		return "", errors.New(line[1:])
	case strings.HasPrefix(line, "$"):
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err // a null bulk string: ""
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("answered %q", line)
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
// redis-server is installed, as its URL, which stop stops. It returns "" when
// there is none, saying why on log: the approaches are then reported as
// skipped, with the reason, and the others run.
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
	return s.URL, s.Stop
}
