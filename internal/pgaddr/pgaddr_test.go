package pgaddr_test

import (
	"context"
	"errors"
	"maps"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// isolate keeps the PG* variables of the machine running the tests out of
// the parse.
func isolate(t *testing.T) {
	for _, v := range []string{"PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGSERVICE", "PGOPTIONS"} {
		t.Setenv(v, "")
	}
}

func TestHostPort(t *testing.T) {
	isolate(t)
	tests := []struct{ conn, want string }{
		{"postgres://localhost/db", "localhost:5432"},
		{"postgres://localhost", "localhost:5432"},
		{"postgresql://db.example.com:6543/app", "db.example.com:6543"},
		{"postgres://u:p@[::1]:5433/db", "[::1]:5433"},
		{"postgres://[2001:db8::7]/db?sslmode=disable", "[2001:db8::7]:5432"},
		{"postgres://h1:5001,h2:5002/db", "h1:5001"},
		{"postgres://u:p@localhost/db?host=other&port=7000", "other:7000"},
		{"host=pg.internal dbname=app", "pg.internal:5432"},
		{"host=::1 port=6000 user=x password='se cret'", "[::1]:6000"},
		{"  host = a,b  port=5001,5002 ", "a:5001"},
		{"host=127.0.0.1 port=55432 user=postgres password=secret dbname=lockfree", "127.0.0.1:55432"},
	}
	for _, tt := range tests {
		got, err := pgaddr.HostPort(tt.conn)
		if err != nil || got != tt.want {
			t.Errorf("HostPort(%q) = %q, %v; want %q", tt.conn, got, err, tt.want)
		}
	}
	for _, bad := range []string{
		"host=/var/run/postgresql dbname=x",
		"postgres:///db?host=/tmp",
		"postgres://localhost:notaport/db",
		"postgres://a:b@[::1",
		"host='unterminated",
		"not a connection string",
	} {
		if got, err := pgaddr.HostPort(bad); !errors.Is(err, pgaddr.ErrInvalid) {
			t.Errorf("HostPort(%q) = %q, %v; want ErrInvalid", bad, got, err)
		}
	}
}

func TestDescribeHidesSecrets(t *testing.T) {
	isolate(t)
	tests := []struct{ conn, want string }{
		{"host=db port=5433 user=app password=hunter2 dbname=shop", "db:5433/shop"},
		{"host=db user=app password='hunter2 x' dbname=shop sslpassword=hunter2", "db:5432/shop"},
		{"postgres://app:hunter2@db/shop?password=hunter2&sslmode=disable", "db:5432/shop"},
		{"postgres://db/shop?password=hunter2", "db:5432/shop"},
		{"postgres://app@[::1]:6000/shop", "[::1]:6000/shop"},
		{"host=/tmp port=5433 dbname=shop password=hunter2", "unix:/tmp:5433/shop"},
		{"postgres://app:hunter2@db:notaport/shop", "(unparseable connection string)"},
		{"password=hunter2 'garbage", "(unparseable connection string)"},
	}
	for _, tt := range tests {
		got := pgaddr.Describe(tt.conn)
		if got != tt.want || strings.Contains(got, "hunter2") || strings.Contains(got, "app") {
			t.Errorf("Describe(%q) = %q, want %q", tt.conn, got, tt.want)
		}
	}
}

// A URL whose user name or password holds an unescaped '@' is refused, by
// every function and without showing any of it: pgconn, like libpq, ends the
// user information at the first '@', so the rest of the password would be
// read as the host (postgres://u:se@cret@h/db goes to host "cret@h").
func TestUnescapedAtInUserInfoIsRefused(t *testing.T) {
	isolate(t)
	for _, conn := range []string{
		"postgres://u:se@cret@h/db",
		"postgresql://u:se@cret@h:5433/db?sslmode=disable",
		"postgres://u:se@cret@h1,h2/db",
		"postgres://u@cret@h/db",
		"postgres://u:se@cret/x@h/db",
		"postgres://u:se@cret?a=b@h/db",
		"postgres://u:se@cret#x@h/db",
	} {
		if got := pgaddr.Describe(conn); strings.Contains(got, "cret") || got != "(unparseable connection string)" {
			t.Errorf("Describe(%q) = %q", conn, got)
		}
		if got, err := pgaddr.HostPort(conn); !errors.Is(err, pgaddr.ErrInvalid) || strings.Contains(err.Error(), "cret") {
			t.Errorf("HostPort(%q) = %q, %v; want ErrInvalid without the password", conn, got, err)
		}
		if got, err := pgaddr.WithHostPort(conn, "127.0.0.1:5432"); !errors.Is(err, pgaddr.ErrInvalid) || strings.Contains(err.Error(), "cret") {
			t.Errorf("WithHostPort(%q) = %q, %v; want ErrInvalid without the password", conn, got, err)
		}
		if got, err := pgaddr.WithParam(conn, "search_path", "x"); !errors.Is(err, pgaddr.ErrInvalid) || strings.Contains(err.Error(), "cret") {
			t.Errorf("WithParam(%q) = %q, %v; want ErrInvalid without the password", conn, got, err)
		}
	}
	// An '@' that is escaped, or that no user information precedes, is data.
	for conn, want := range map[string]string{
		"postgres://u:se%40cret@h/db":                "h:5432/db",
		"postgres://h/my@db":                         "h:5432/my@db",
		"postgres://h/db?application_name=a@b":       "h:5432/db",
		"host=h user=u password=se@cret@h dbname=db": "h:5432/db",
		"postgres://u:p@h/db?application_name=a%40b": "h:5432/db",
	} {
		if got := pgaddr.Describe(conn); got != want {
			t.Errorf("Describe(%q) = %q, want %q", conn, got, want)
		}
	}
}

// settings is what a connection string means, apart from where it goes.
func settings(t *testing.T, conn string) (user, password, database string, params map[string]string) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(conn)
	if err != nil {
		t.Fatalf("ParseConfig(%q): %v", conn, err)
	}
	return cfg.User, cfg.Password, cfg.Database, cfg.RuntimeParams
}

var rewritable = []string{
	"postgres://app:hunter2@db.example.com:6543/shop",
	"postgres://app:hunter2@db.example.com:6543/shop?sslmode=disable&application_name=x",
	"postgresql://app:p%3Fss%40@[::1]:6543/shop",
	"postgres://app@h1:5001,h2:5002/shop?search_path=a",
	"postgres://app@localhost",
	"host=db.example.com port=6543 user=app password='hunter 2' dbname=shop sslmode=disable",
	`host=h1,h2 port=5001,5002 user=app password=it\'s dbname=shop`,
	"host=/var/run/postgresql user=app dbname=shop",
}

func TestWithHostPortKeepsEverythingElse(t *testing.T) {
	isolate(t)
	for _, conn := range rewritable {
		for _, addr := range []string{"127.0.0.1:40000", "[::1]:40001", "proxy.local:40002"} {
			got, err := pgaddr.WithHostPort(conn, addr)
			if err != nil {
				t.Errorf("WithHostPort(%q, %q): %v", conn, addr, err)
				continue
			}
			if hp, err := pgaddr.HostPort(got); hp != addr {
				t.Errorf("WithHostPort(%q, %q) = %q, which goes to %q (%v)", conn, addr, got, hp, err)
			}
			cfg, _ := pgconn.ParseConfig(got)
			for _, fb := range cfg.Fallbacks { // sslmode=prefer: TLS, then plain, to the same host
				if hp := net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))); hp != addr {
					t.Errorf("WithHostPort(%q, %q) = %q keeps the fallback host %s", conn, addr, got, hp)
				}
			}
			u1, p1, d1, r1 := settings(t, conn)
			u2, p2, d2, r2 := settings(t, got)
			if u1 != u2 || p1 != p2 || d1 != d2 || !maps.Equal(r1, r2) {
				t.Errorf("WithHostPort(%q, %q) = %q changed the settings: %q %q %q %v, want %q %q %q %v",
					conn, addr, got, u2, p2, d2, r2, u1, p1, d1, r1)
			}
		}
	}
	for _, bad := range []string{"", "localhost", ":5432", "host:"} {
		if _, err := pgaddr.WithHostPort(rewritable[0], bad); !errors.Is(err, pgaddr.ErrInvalid) {
			t.Errorf("WithHostPort(…, %q): %v, want ErrInvalid", bad, err)
		}
	}
}

func TestWithParam(t *testing.T) {
	isolate(t)
	for _, conn := range rewritable {
		for _, value := range []string{"compare_x_1", "a b'c\\d&e=f?g+h%"} {
			got, err := pgaddr.WithParam(conn, "search_path", value)
			if err != nil {
				t.Errorf("WithParam(%q): %v", conn, err)
				continue
			}
			u1, p1, d1, r1 := settings(t, conn)
			u2, p2, d2, r2 := settings(t, got)
			if r2["search_path"] != value {
				t.Errorf("WithParam(%q) = %q: search_path %q, want %q", conn, got, r2["search_path"], value)
			}
			delete(r1, "search_path")
			delete(r2, "search_path")
			if u1 != u2 || p1 != p2 || d1 != d2 || !maps.Equal(r1, r2) {
				t.Errorf("WithParam(%q) = %q changed other settings", conn, got)
			}
		}
	}
	if _, err := pgaddr.WithParam(rewritable[0], "a b", "x"); !errors.Is(err, pgaddr.ErrInvalid) {
		t.Errorf("a parameter name with a space: %v, want ErrInvalid", err)
	}
}

// TestRewrittenStringsConnect connects through a proxy to the test server
// with the URL and the key/value form of its connection string, rewritten
// by WithHostPort and WithParam.
func TestRewrittenStringsConnect(t *testing.T) {
	base := testdb.URL(t)
	cfg, err := pgconn.ParseConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	target, err := pgaddr.HostPort(base)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	kv := "host=" + cfg.Host + " port=" + strings.TrimPrefix(target[strings.LastIndex(target, ":"):], ":") +
		" user='" + cfg.User + "' password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(cfg.Password) +
		"' dbname='" + cfg.Database + "' sslmode=disable"
	for _, conn := range []string{base, kv} {
		via, err := pgaddr.WithHostPort(conn, proxy.Addr())
		if err == nil {
			via, err = pgaddr.WithParam(via, "application_name", "pgaddr test")
		}
		if err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(context.Background(), via)
		if err != nil {
			t.Fatalf("connect through the proxy with %s: %v", pgaddr.Describe(conn), err)
		}
		var name string
		err = c.QueryRow(context.Background(), "SELECT current_setting('application_name')").Scan(&name)
		c.Close(context.Background())
		if err != nil || name != "pgaddr test" {
			t.Fatalf("application_name = %q, %v", name, err)
		}
	}
}
