// Package localpg starts a throwaway PostgreSQL server from the machine's own
// binaries (PATH, or Debian's /usr/lib/postgresql/<version>/bin): initdb into
// a temporary folder, a free loopback port, trust authentication. It backs
// `lockfree compare` and the examples when no database is given, and can stop
// and restart the server to inject faults.
package localpg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries reports that no PostgreSQL server binaries were found.
var ErrNoBinaries = errors.New("localpg: no PostgreSQL binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql")

// Server is a running throwaway server. Its methods are not safe for
// concurrent use.
type Server struct {
	// URL connects to the server's "lockfree" database.
	URL string

	bin, dir, data string
	port           int
}

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
	if err := s.Start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port))
	if err != nil {
		s.Stop()
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE lockfree"); err != nil {
		s.Stop()
		return nil, err
	}
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/lockfree?sslmode=disable", s.port)
	return s, nil
}

func (s *Server) init(ctx context.Context) error {
	if err := s.chown(s.dir); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	if out, err := s.run(ctx, "initdb", "-D", s.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"); err != nil {
		return fmt.Errorf("localpg: initdb: %w\n%s", err, out)
	}
	// 600 connections: `lockfree compare --clients 64` runs 64 worker
	// processes, each with a pool of up to 8 and a lock service's.
	conf := fmt.Sprintf("\nlisten_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\nmax_connections = 600\nshared_buffers = 128MB\n", s.port, s.dir)
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(conf)
	return err
}

// Start starts the (stopped) server and waits until it accepts connections.
func (s *Server) Start(ctx context.Context) error {
	out, err := s.run(ctx, "pg_ctl", "-D", s.data, "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60", "start")
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
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	if os.Geteuid() == 0 {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", filepath.Join(s.bin, name)}, args...)...)
	}
	return cmd.CombinedOutput()
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
