// Package pgaddr reads and rewrites PostgreSQL connection strings, both URLs
// (postgres://user@host:5432/db?…) and key/value DSNs (host=… port=…), in one
// place. pgconn's own parser decides what a string means, so the address
// found here is the one a pool would dial: default port 5432, PG*
// environment variables, and pgx's choice of a Unix socket when no host is
// given.
package pgaddr

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/internal/short"
)

// ErrInvalid reports a connection string that does not parse, or one that
// cannot be used as asked (a Unix socket where a TCP address is needed). A
// URL with user information and another '@' after it is one: its user name
// or password must be percent-encoded ('@' as %40).
var ErrInvalid = errors.New("pgaddr: invalid connection string")

// parse wraps pgconn.ParseConfig, whose errors already redact passwords. It
// first refuses a URL with an '@' after its user information: pgconn, like
// libpq, ends the user information at the first '@', so an unescaped '@' in
// a password (postgres://u:se@cret@h/db) leaves the rest of the password
// where the host, the database or the query is read, and from there in
// every message that shows them. Such a string never means what it says;
// no part of it is echoed.
func parse(conn string) (*pgconn.Config, error) {
	if atAfterUserInfo(conn) {
		return nil, fmt.Errorf("%w: an '@' after the user information of a URL (percent-encode '@' as %%40 in a user name or password)", ErrInvalid)
	}
	cfg, err := pgconn.ParseConfig(conn)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return cfg, nil
}

// HostPort returns the TCP address (host:port, IPv6 hosts in brackets) of
// conn's first host. A string that connects through a Unix socket is an
// ErrInvalid: there is no TCP address to give.
func HostPort(conn string) (string, error) {
	cfg, err := parse(conn)
	if err != nil {
		return "", err
	}
	if isSocket(cfg.Host) {
		return "", fmt.Errorf("%w: it connects through the Unix socket in %s, not TCP", ErrInvalid, cfg.Host)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

// Describe returns host:port/database for messages and logs, and nothing
// else of conn: never the user, the password or other parameters. A string
// that does not parse is described as such, without echoing it; so is a URL
// with an unescaped '@' in its user name or password (see ErrInvalid).
func Describe(conn string) string {
	cfg, err := parse(conn)
	if err != nil {
		return "(unparseable connection string)"
	}
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	if isSocket(cfg.Host) {
		addr = "unix:" + cfg.Host + ":" + strconv.Itoa(int(cfg.Port))
	}
	return addr + "/" + cfg.Database
}

// WithHostPort returns conn pointing at addr (host:port) instead of its own
// host or hosts, everything else kept: the user, password, database, TLS
// settings and runtime parameters.
func WithHostPort(conn, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return "", fmt.Errorf("%w: address %s is not host:port", ErrInvalid, short.Quote(addr))
	}
	return set(conn, "host", host, "port", port)
}

// WithParam returns conn with the parameter key set to value, replacing any
// value conn had: a connection setting (dbname, sslmode) or a runtime
// parameter sent to the server (search_path, application_name).
func WithParam(conn, key, value string) (string, error) {
	if key == "" || strings.ContainsAny(key, " \t\n\r\v\f=&?'\\") {
		return "", fmt.Errorf("%w: parameter name %s", ErrInvalid, short.Quote(key))
	}
	return set(conn, key, value)
}

// set appends key/value pairs to conn. Both forms let a later setting
// override an earlier one (libpq's rule, which pgconn follows), and a URL's
// query parameters override its host list, so appending changes exactly the
// given settings and keeps the rest of conn byte for byte.
func set(conn string, kv ...string) (string, error) {
	if _, err := parse(conn); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(conn)
	isURL := isURL(conn)
	sep := " "
	if isURL {
		sep = "?"
		if hasQuery(conn) {
			sep = "&"
		}
	}
	for i := 0; i < len(kv); i += 2 {
		b.WriteString(sep)
		if isURL {
			b.WriteString(uriEscape(kv[i]) + "=" + uriEscape(kv[i+1]))
			sep = "&"
		} else {
			b.WriteString(kv[i] + "=" + quoteValue(kv[i+1]))
		}
	}
	out := b.String()
	if _, err := parse(out); err != nil {
		return "", err
	}
	return out, nil
}

func isURL(conn string) bool {
	return strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://")
}

// hasQuery reports whether a connection URL has a query part. Like pgconn,
// it skips the user information first (up to an '@' that comes before any
// '/'), where a '?' belongs to the password.
func hasQuery(u string) bool {
	_, rest, _ := strings.Cut(u, "://")
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		rest = rest[i+1:]
	}
	return strings.Contains(rest, "?")
}

// atAfterUserInfo reports whether conn is a URL with user information (up
// to an '@' that comes before any '/', as pgconn reads it) and another '@'
// anywhere after it.
func atAfterUserInfo(conn string) bool {
	if !isURL(conn) {
		return false
	}
	_, rest, _ := strings.Cut(conn, "://")
	i := strings.IndexAny(rest, "@/")
	return i >= 0 && rest[i] == '@' && strings.Contains(rest[i+1:], "@")
}

func isSocket(host string) bool { return strings.HasPrefix(host, "/") }

// uriEscape percent-encodes everything but RFC 3986's unreserved
// characters. (url.QueryEscape would write a space as '+', which libpq and
// pgconn read as a plus sign.)
func uriEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// quoteValue quotes a key/value DSN value: single quotes, with backslash
// before a quote or a backslash.
func quoteValue(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
