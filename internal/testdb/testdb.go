// Package testdb gives each test an isolated, migrated schema in a real
// PostgreSQL server.
//
// The server comes from TEST_DATABASE_URL (scripts/postgres.sh prints it);
// when unset, from testcontainers-go if a Docker daemon answers; otherwise the
// test is skipped with the reason — except under CI=true, where a missing
// server fails the test, so a green CI run always means the tests ran.
package testdb

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/pgschema"
	"github.com/lockfree-go/lockfree/migrate"
)

// DB is one test's schema.
type DB struct {
	// Pool connects with search_path set to Schema, so unqualified lockfree
	// tables resolve there.
	Pool *pgxpool.Pool
	// Schema is the test's own schema, dropped when the test ends.
	Schema string
	// URL connects to the same schema (search_path in the URL); give it to
	// child processes and to proxies' clients.
	URL string
}

// New creates a fresh schema, applies ms to it, and drops it in t.Cleanup.
func New(t testing.TB, ms ...migrate.Migration) *DB {
	t.Helper()
	return newSchema(t, URL(t), ms)
}

func newSchema(t testing.TB, base string, ms []migrate.Migration) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := pgschema.New(ctx, base, "t_"+t.Name())
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() {
		// The server may have been stopped or restarted by the test:
		// Close retries the drop for a minute.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Logf("testdb: %v", err)
		}
	})
	if len(ms) > 0 {
		if err := migrate.Up(ctx, s.Pool, migrate.Names{}, ms); err != nil {
			t.Fatalf("testdb: %v", err)
		}
	}
	return &DB{Pool: s.Pool, Schema: s.Name, URL: s.URL}
}

// WithSearchPath returns the connection string u with search_path set to
// schema. It panics when u does not parse: a test's own server URL does.
func WithSearchPath(u, schema string) string {
	out, err := pgaddr.WithParam(u, "search_path", schema)
	if err != nil {
		panic("testdb: " + err.Error())
	}
	return out
}

// URL returns the server's connection URL, or skips (fails under CI=true)
// when there is none.
func URL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	if u, err := container(); err == nil {
		return u
	} else {
		Missing(t, "PostgreSQL", "TEST_DATABASE_URL is unset and no Docker daemon answers ("+err.Error()+")")
	}
	return ""
}

// Missing reports a service a test needs and cannot have: t.Fatal under
// CI=true, t.Skip otherwise.
func Missing(t testing.TB, service, why string) {
	t.Helper()
	msg := fmt.Sprintf("%s is not available: %s; run `make test`, or `make services` and the exports it prints", service, why)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

var (
	containerOnce sync.Once
	containerURL  string
	containerErr  error
)

// container starts one PostgreSQL container per test binary when a Docker
// daemon answers. It is left to testcontainers' reaper to remove.
func container() (string, error) {
	containerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := testcontainers.NewDockerProvider(); err != nil {
			containerErr = err
			return
		}
		c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
			ContainerRequest: testcontainers.ContainerRequest{
				Image:        "postgres:15",
				ExposedPorts: []string{"5432/tcp"},
				Env:          map[string]string{"POSTGRES_HOST_AUTH_METHOD": "trust", "POSTGRES_DB": "lockfree"},
				WaitingFor:   wait.ForListeningPort("5432/tcp").WithStartupTimeout(2 * time.Minute),
			},
			Started: true,
		})
		if err != nil {
			containerErr = err
			return
		}
		host, err := c.Host(ctx)
		if err != nil {
			containerErr = err
			return
		}
		port, err := c.MappedPort(ctx, "5432/tcp")
		if err != nil {
			containerErr = err
			return
		}
		containerURL = fmt.Sprintf("postgres://postgres@%s:%s/lockfree?sslmode=disable", host, port.Port())
	})
	return containerURL, containerErr
}

// FaultDB is a schema on the fault-injection server: a second local
// PostgreSQL instance that the test may stop, start and restart. Tests that
// use it, in any package, run one at a time (a file lock serialises them),
// so a restart never disturbs another test.
type FaultDB struct {
	*DB
	t   testing.TB
	ctl string
}

// Faults returns a migrated schema on the fault-injection server
// (TEST_FAULT_DATABASE_URL, controlled by TEST_FAULT_POSTGRES_CTL, both printed
// by scripts/postgres.sh env). Without them the test is skipped — failed under
// CI=true — rather than pretending to inject a fault it cannot.
func Faults(t testing.TB, ms ...migrate.Migration) *FaultDB {
	t.Helper()
	u, ctl := os.Getenv("TEST_FAULT_DATABASE_URL"), os.Getenv("TEST_FAULT_POSTGRES_CTL")
	if u == "" || ctl == "" {
		Missing(t, "a PostgreSQL server this test may restart",
			"TEST_FAULT_DATABASE_URL and TEST_FAULT_POSTGRES_CTL are unset")
		return nil
	}
	lockFaults(t, pgaddr.Describe(u))
	f := &FaultDB{t: t, ctl: ctl}
	// A previous test may have left the server stopped.
	f.Control("start")
	f.DB = newSchema(t, u, ms)
	// Runs first among the cleanups: leave the server up for the schema
	// drop and the next test.
	t.Cleanup(func() {
		if out, err := exec.Command("bash", "-c", ctl+" start").CombinedOutput(); err != nil {
			t.Errorf("testdb: restarting the fault server after the test: %v\n%s", err, out)
		}
	})
	return f
}

// Control runs the server's control script with action "stop", "start" or
// "restart", and fails the test if it fails. Start and restart return once
// the server answers.
func (f *FaultDB) Control(action string) {
	f.t.Helper()
	out, err := exec.Command("bash", "-c", f.ctl+" "+action).CombinedOutput()
	if err != nil {
		f.t.Fatalf("testdb: %s %s: %v\n%s", f.ctl, action, err, out)
	}
}

// lockFaults takes an exclusive lock, shared by every test binary that uses
// the same fault server, until the test ends. The lock file is named after
// the server, so two checkouts with their own servers do not wait for each
// other, and it is opened read-only when it exists (flock needs no write
// access), so a file created by root does not lock out an ordinary user.
func lockFaults(t testing.TB, server string) {
	t.Helper()
	sum := sha256.Sum256([]byte(server))
	path := filepath.Join(os.TempDir(), fmt.Sprintf("lockfree-fault-server-%x.lock", sum[:6]))
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		fh, err = os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o444)
	}
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	if err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX); err != nil {
		fh.Close()
		t.Fatalf("testdb: lock %s: %v", path, err)
	}
	t.Cleanup(func() {
		syscall.Flock(int(fh.Fd()), syscall.LOCK_UN)
		fh.Close()
	})
}
