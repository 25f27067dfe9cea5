package scripts_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
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
)

// withoutPassword returns u with its password removed.
func withoutPassword(t *testing.T, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	parsed.User = url.User(parsed.User.Username())
	return parsed.String()
}

func urlPassword(t *testing.T, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := parsed.User.Password()
	return pw
}

// refused: connecting to u fails.
func refused(t *testing.T, u, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err == nil {
		conn.Close(ctx)
		t.Errorf("%s: connected", what)
	}
}

// stranger returns a local account other than the test's and the servers':
// nobody, else one the test makes (and removes). Only root can switch to it.
func stranger(t *testing.T) string {
	t.Helper()
	if _, err := user.Lookup("nobody"); err == nil {
		return "nobody"
	}
	const name = "lockfree-stranger"
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/bin/sh", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("userdel", name).Run() })
	return name
}

// psqlPath finds the psql client.
func psqlPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql"); len(m) > 0 {
		return m[len(m)-1]
	}
	t.Fatal("psql not found")
	return ""
}

// testPostgresAuth: the servers of `up` let in no one without the password
// of .services/postgres.password; as root, another local account cannot
// connect as the superuser, so it cannot run COPY … TO PROGRAM as the OS
// user postgres.
func testPostgresAuth(t *testing.T, root, as string, vars map[string]string) {
	uid := os.Getuid()
	if as != "" {
		u, err := user.Lookup(as)
		if err != nil {
			t.Fatal(err)
		}
		uid, _ = strconv.Atoi(u.Uid)
	}
	for _, name := range []string{"TEST_DATABASE_URL", "TEST_FAULT_DATABASE_URL"} {
		u := vars[name]
		refused(t, withoutPassword(t, u), name+" without its password")
		wrong, _ := url.Parse(u)
		wrong.User = url.UserPassword("postgres", "not-the-password")
		refused(t, wrong.String(), name+" with another password")
	}
	defer checkSecret(t, root, "postgres", urlPassword(t, vars["TEST_DATABASE_URL"]), uid)
	if os.Getuid() != 0 || as != "" {
		return
	}
	other := stranger(t)
	marker := filepath.Join(os.TempDir(), "lockfree-copy-to-program-"+strconv.Itoa(os.Getpid()))
	os.Remove(marker)
	t.Cleanup(func() { os.Remove(marker) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := command(ctx, other, psqlPath(t), "-X", "-w", withoutPassword(t, vars["TEST_DATABASE_URL"]),
		"-c", "COPY (SELECT 1) TO PROGRAM 'touch "+marker+"'").CombinedOutput()
	if err == nil {
		t.Errorf("account %s connected without the password and ran COPY … TO PROGRAM:\n%s", other, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("account %s ran a program as the server's OS user (%s exists)", other, marker)
	}
}

// testPostgresTrustMigrated: a cluster made before passwords (trust in
// pg_hba.conf, no password file) gets a password and scram-sha-256 at the
// next `up`, and keeps its data.
func testPostgresTrustMigrated(t *testing.T, root, as string, vars map[string]string, dataDirs []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, vars["TEST_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{`CREATE TABLE kept (x int)`, `INSERT INTO kept VALUES (1)`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)
	for i, name := range []string{"TEST_DATABASE_URL", "TEST_FAULT_DATABASE_URL"} {
		hba := filepath.Join(dataDirs[i], "pg_hba.conf")
		if err := os.WriteFile(hba, []byte("host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(ctx, vars[name])
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Exec(ctx, `SELECT pg_reload_conf()`)
		c.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(root, ".services", "postgres.password")); err != nil {
		t.Fatal(err)
	}
	if c, err := pgx.Connect(ctx, withoutPassword(t, vars["TEST_DATABASE_URL"])); err != nil {
		t.Fatalf("the trust cluster of the test refused a connection without password: %v", err)
	} else {
		c.Close(ctx)
	}

	_, errOut, err := script(root, as, nil, "postgres.sh", "up")
	if err != nil {
		t.Fatalf("postgres.sh up on a trust cluster: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "made before passwords") {
		t.Errorf("up said nothing of the migration:\n%s", errOut)
	}
	again := exports(t, mustScript(t, root, as, "postgres.sh", "env"))
	if urlPassword(t, again["TEST_DATABASE_URL"]) == urlPassword(t, vars["TEST_DATABASE_URL"]) {
		t.Error("the password did not change with its file gone")
	}
	for _, name := range []string{"TEST_DATABASE_URL", "TEST_FAULT_DATABASE_URL"} {
		refused(t, withoutPassword(t, again[name]), name+" without its password, after the migration")
	}
	conn, err = pgx.Connect(ctx, again["TEST_DATABASE_URL"])
	if err != nil {
		t.Fatalf("after the migration: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM kept`).Scan(&n); err != nil || n != 1 {
		t.Errorf("the data made before the migration: %d rows, %v", n, err)
	}
	for k, v := range again {
		vars[k] = v
	}
}

// TestPostgresRefusesPlantedLinks: as root with a private checkout, the data
// goes to /var/lib/postgresql/lockfree-<hash>/, a folder of the postgres
// account. A symbolic link that account planted there (the folder itself, a
// cluster's folder, a file root would have written) is refused with a clear
// error, and its target is left as it was: not handed to postgres, not
// written.
func TestPostgresRefusesPlantedLinks(t *testing.T) {
	t.Parallel()
	postgresAvailable(t)
	if os.Getuid() != 0 {
		t.Skip("only root's data goes to /var/lib/postgresql; the test plants links as the postgres account")
	}
	if _, err := user.Lookup("postgres"); err != nil {
		// As scripts/lib/pg.sh makes it.
		if out, err := exec.Command("useradd", "--system", "--home-dir", "/var/lib/postgresql", "--shell", "/bin/bash", "postgres").CombinedOutput(); err != nil {
			t.Fatalf("useradd postgres: %v\n%s", err, out)
		}
	}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, outside, victim string)
	}{
		{"service folder", func(t *testing.T, outside, victim string) {
			asPostgres(t, "ln", "-s", victim, outside)
		}},
		{"cluster folder", func(t *testing.T, outside, victim string) {
			asPostgres(t, "mkdir", "-m", "0700", outside)
			asPostgres(t, "ln", "-s", victim, filepath.Join(outside, "postgres-main"))
		}},
		{"log file", func(t *testing.T, outside, victim string) {
			asPostgres(t, "mkdir", "-m", "0700", "-p", filepath.Join(outside, "postgres-main"))
			asPostgres(t, "ln", "-s", filepath.Join(victim, "keep"), filepath.Join(outside, "postgres-main", "initdb.log"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := checkout(t)
			sum := sha256.Sum256([]byte(root))
			outside := "/var/lib/postgresql/lockfree-" + hex.EncodeToString(sum[:])[:12]
			if _, err := os.Lstat(outside); err == nil {
				t.Fatalf("%s exists already", outside)
			}
			if err := os.MkdirAll("/var/lib/postgresql", 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				script(root, "", nil, "postgres.sh", "down", "--purge")
				os.RemoveAll(outside) // a link: the link alone
			})
			// The victim stands for /etc: root's, not postgres's.
			victim := filepath.Join(t.TempDir(), "etc")
			if err := os.Mkdir(victim, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(victim, "keep"), []byte("root's\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, victim)
			tc.plant(t, outside, victim)

			_, errOut, err := script(root, "", nil, "postgres.sh", "up")
			if err == nil {
				t.Errorf("postgres.sh up with a link planted in %s succeeded:\n%s", outside, errOut)
			}
			t.Logf("postgres.sh up:\n%s", errOut)
			if !strings.Contains(errOut, "symbolic link") || !strings.Contains(errOut, "refusing") {
				t.Errorf("postgres.sh up did not say it refuses the link:\n%s", errOut)
			}
			if after := snapshot(t, victim); after != before {
				t.Errorf("the link's target was touched:\nbefore %s\nafter  %s\n%s", before, after, errOut)
			}
			// The way out the message gives.
			if _, errOut, err := script(root, "", nil, "postgres.sh", "down", "--purge"); err != nil {
				t.Errorf("postgres.sh down --purge: %v\n%s", err, errOut)
			}
			if _, err := os.Lstat(outside); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("down --purge left %s (%v)", outside, err)
			}
			if after := snapshot(t, victim); after != before {
				t.Errorf("down --purge touched the link's target:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func asPostgres(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := command(context.Background(), "postgres", argv...).CombinedOutput(); err != nil {
		t.Fatalf("as postgres: %v: %v\n%s", argv, err, out)
	}
}

// snapshot describes a folder: its owner and mode, and each entry's name,
// owner, mode and content.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %d:%d %v", strings.TrimPrefix(p, dir), st.Uid, st.Gid, fi.Mode())
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteString("; ")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestPostgresPortsTaken: a checkout's remembered ports, taken since by
// other processes, move to free ones: main's by a listener (seen before the
// start), faults' by a socket bound without listening (invisible to the
// probe, so the server's bind fails: another checkout started at the same
// moment). Then two checkouts that remember the same ports start at the
// same moment, and both come up.
func TestPostgresPortsTaken(t *testing.T) {
	t.Parallel()
	postgresAvailable(t)
	t.Run("remembered ports taken", func(t *testing.T) {
		root := checkout(t)
		t.Cleanup(func() { script(root, "", nil, "postgres.sh", "down", "--purge") })
		taken, bound := holdListening(t), holdBound(t)
		remember(t, root, "postgres", map[string]int{"main": taken, "faults": bound})
		_, errOut, err := script(root, "", nil, "postgres.sh", "up")
		if err != nil {
			t.Fatalf("postgres.sh up with its remembered ports taken: %v\n%s", err, errOut)
		}
		t.Logf("postgres.sh up:\n%s", errOut)
		if !strings.Contains(errOut, "meanwhile") {
			t.Errorf("postgres.sh up did not say it moved the port taken meanwhile:\n%s", errOut)
		}
		vars := exports(t, mustScript(t, root, "", "postgres.sh", "env"))
		for name, held := range map[string]int{"TEST_DATABASE_URL": taken, "TEST_FAULT_DATABASE_URL": bound} {
			if p := urlPort(t, vars[name]); p == held {
				t.Errorf("%s is on port %d, which another process holds", name, p)
			}
			if p, _ := server(t, vars[name]); p != urlPort(t, vars[name]) {
				t.Errorf("%s reaches port %d", name, p)
			}
		}
	})
	t.Run("two checkouts at once", func(t *testing.T) {
		main, faults := freePort(t), freePort(t)
		roots := []string{checkout(t), checkout(t)}
		for _, root := range roots {
			t.Cleanup(func() { script(root, "", nil, "postgres.sh", "down", "--purge") })
			remember(t, root, "postgres", map[string]int{"main": main, "faults": faults})
		}
		urls := atOnce(t, roots, "postgres.sh", "TEST_DATABASE_URL", "TEST_FAULT_DATABASE_URL")
		ports := map[int]string{}
		for _, u := range urls {
			p, _ := server(t, u)
			if other, ok := ports[p]; ok {
				t.Errorf("%s and %s reach the same server (port %d)", other, u, p)
			}
			ports[p] = u
		}
	})
}

// TestReplicationPassword: the pair of pg-replication.sh lets no one in
// without the password that env's URLs carry, replication included (the
// standby streams with it). A pair made before passwords (trust) is made
// anew by up, which says so.
func TestReplicationPassword(t *testing.T) {
	t.Parallel()
	postgresAvailable(t)
	root := checkout(t)
	t.Cleanup(func() { script(root, "", nil, "pg-replication.sh", "down", "--purge") })
	up := func() (map[string]string, string) {
		t.Helper()
		_, errOut, err := script(root, "", nil, "pg-replication.sh", "up")
		if err != nil {
			t.Fatalf("pg-replication.sh up: %v\n%s", err, errOut)
		}
		return exports(t, mustScript(t, root, "", "pg-replication.sh", "env")), errOut
	}
	streams := func(vars map[string]string) {
		t.Helper()
		if out := mustScript(t, root, "", "pg-replication.sh", "status"); !strings.Contains(out, "receiver streaming") {
			t.Errorf("the standby does not stream:\n%s", out)
		}
		for _, name := range []string{"TEST_REPL_NODE1_URL", "TEST_REPL_NODE2_URL"} {
			server(t, vars[name])
			refused(t, withoutPassword(t, vars[name]), name+" without its password")
		}
	}
	vars, _ := up()
	streams(vars)
	checkSecret(t, root, "pg-replication", urlPassword(t, vars["TEST_REPL_NODE1_URL"]), os.Getuid())

	// A pair from before passwords: trust, no password file.
	_, data := server(t, vars["TEST_REPL_NODE1_URL"])
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte("host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustScript(t, root, "", "pg-replication.sh", "down")
	if err := os.Remove(filepath.Join(root, ".services", "pg-replication.password")); err != nil {
		t.Fatal(err)
	}
	again, errOut := up()
	if !strings.Contains(errOut, "made before passwords") {
		t.Errorf("up said nothing of the pair made before passwords:\n%s", errOut)
	}
	streams(again)
}
