// Package localpg starts a throwaway PostgreSQL server from the machine's own
// binaries (PATH, or Debian's /usr/lib/postgresql/<version>/bin): initdb into
// a temporary folder, a free loopback port, scram-sha-256 authentication with
// a random password that only [Server.URL] carries. It backs `lockfree
// compare` and the examples when no database is given, and can stop and
// restart the server to inject faults.
//
// Other local accounts reach the server's port but not its data: without the
// password they cannot connect, so they cannot act as its superuser (COPY …
// TO PROGRAM runs commands as the server's OS user). Its Unix socket is in
// the server's own folder, which only that user can enter.
package localpg

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries reports that no PostgreSQL server binaries were found.
var ErrNoBinaries = errors.New("localpg: no PostgreSQL binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql")

// Server is a running throwaway server. Its methods are not safe for
// concurrent use.
type Server struct {
	// URL connects to the server's "lockfree" database, as the superuser
	// postgres with the server's password.
	URL string

	bin, dir, data string
	password       string
	port           int
}

// startAttempts bounds the ports Start tries: a port found free can be taken
// by another process before the server binds it.
const startAttempts = 3

func findBin() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

// Available reports whether Start can find the binaries.
func Available() bool {
	_, err := findBin()
	return err == nil
}

// Start initialises and starts a server; Stop removes it.
func Start(ctx context.Context) (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lockfree-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, data: filepath.Join(dir, "data")}
	if err := s.init(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.startFirst(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	s.URL = s.url("postgres")
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		s.Stop()
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE lockfree"); err != nil {
		s.Stop()
		return nil, err
	}
	s.URL = s.url("lockfree")
	return s, nil
}

func (s *Server) url(db string) string {
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/%s?sslmode=disable", s.password, s.port, db)
}

// startFirst starts the new server on a free port, and on another when
// another process took that one before the server bound it.
func (s *Server) startFirst(ctx context.Context) error {
	var err error
	for range startAttempts {
		if s.port, err = pickPort(); err != nil {
			return err
		}
		// The last port line of the file wins.
		if err = s.appendConf(fmt.Sprintf("port = %d\n", s.port)); err != nil {
			return err
		}
		before, _ := os.ReadFile(s.logFile())
		if err = s.Start(ctx); err == nil {
			return nil
		}
		after, _ := os.ReadFile(s.logFile())
		if !bytes.Contains(after[min(len(before), len(after)):], []byte("Address already in use")) {
			return err
		}
	}
	return err
}

// pickPort is freePort; tests replace it to hand out a port that is taken.
var pickPort = freePort

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("localpg: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) logFile() string { return filepath.Join(s.dir, "log") }

// init makes the cluster: the superuser postgres with a random password,
// scram-sha-256 for every connection (initdb's --auth), the password handed
// to initdb in a file only the server's user reads, deleted afterwards.
func (s *Server) init(ctx context.Context) error {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("localpg: a password: %w", err)
	}
	s.password = hex.EncodeToString(b)
	pwfile := filepath.Join(s.dir, "initdb.pw")
	if err := s.writeOwn(pwfile, s.password+"\n"); err != nil {
		return err
	}
	defer os.Remove(pwfile)
	if err := s.chown(s.dir); err != nil {
		return err
	}
	if out, err := s.run(ctx, "initdb", "-D", s.data, "-U", "postgres", "--auth=scram-sha-256", "--pwfile="+pwfile,
		"-E", "UTF8", "--locale=C.UTF-8"); err != nil {
		return fmt.Errorf("localpg: initdb: %w\n%s", err, out)
	}
	// 600 connections: `lockfree compare --clients 64` runs 64 worker
	// processes, each with a pool of up to 8 and a lock service's.
	return s.appendConf(fmt.Sprintf("\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nmax_connections = 600\nshared_buffers = 128MB\n", s.dir))
}

// writeOwn writes a new file, mode 0600, that belongs to the server's user.
func (s *Server) writeOwn(name, content string) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return s.chown(name)
}

// appendConf appends to postgresql.conf, as the server's user: its folder
// is that user's, and root follows no link planted there.
func (s *Server) appendConf(text string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := s.command(ctx, "tee", "-a", filepath.Join(s.data, "postgresql.conf"))
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("localpg: writing postgresql.conf: %w\n%s", err, out)
	}
	return nil
}

// Start starts the (stopped) server and waits until it accepts connections.
func (s *Server) Start(ctx context.Context) error {
	out, err := s.run(ctx, "pg_ctl", "-D", s.data, "-l", s.logFile(), "-w", "-t", "60", "start")
	if err != nil {
		return fmt.Errorf("localpg: start: %w\n%s", err, out)
	}
	return nil
}

// Halt stops the server with a fast shutdown, keeping its data.
func (s *Server) Halt(ctx context.Context) error {
	out, err := s.run(ctx, "pg_ctl", "-D", s.data, "-m", "fast", "-w", "-t", "60", "stop")
	if err != nil {
		return fmt.Errorf("localpg: stop: %w\n%s", err, out)
	}
	return nil
}

// Restart halts and starts the server.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Halt(ctx); err != nil {
		return err
	}
	return s.Start(ctx)
}

// Stop halts the server and deletes its data.
func (s *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = s.run(ctx, "pg_ctl", "-D", s.data, "-m", "immediate", "-w", "stop") // already stopped is fine
	os.RemoveAll(s.dir)
}

// run runs a PostgreSQL binary, as the postgres user when we are root
// (initdb and postgres refuse to run as root).
func (s *Server) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return s.command(ctx, filepath.Join(s.bin, name), args...).CombinedOutput()
}

// command runs a program as the server's user: postgres when we are root.
func (s *Server) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.CommandContext(ctx, name, args...)
}

func (s *Server) chown(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("localpg: running as root needs a postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(dir, uid, gid)
}
