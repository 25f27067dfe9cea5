package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the schema of the PostgreSQL backend, for migrate.Up
// and migrate.Print (or `lockfree migrate`): the fence functions (package
// "fence", shared with every lockfree package that mints fences, and
// applied once however many of them an application migrates), then the
// keys table.
func Migrations() []migrate.Migration {
	return append(fence.Migrations(), migrate.FromDir("idempotency", migrationFiles, "migrations")...)
}

// DB is what the PostgreSQL backend needs from a connection to run its
// statements: *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// TxDB is a DB that can also begin a transaction, which Postgres.Do runs
// its work in: *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it.
type TxDB interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// PostgresConfig configures a Postgres store. A nil *PostgresConfig means
// the defaults.
type PostgresConfig struct {
	// Tables says where the tables live. Defaults to the connection's
	// search_path and the prefix "lockfree_".
	Tables migrate.Names
	// Retention is how long a key is remembered and its result replayed,
	// counted from its completion; at least 1ms. Defaults to 24h.
	Retention time.Duration
	// TombstoneRetention is how long a purged key stays spent after its
	// retention ended, so that a late retry gets ErrExpired rather than a
	// second execution. Set it longer than any client retries. Defaults to
	// 7 days.
	TombstoneRetention time.Duration
	// InFlightWait bounds how long a duplicate of a transactional
	// execution in flight waits for it to end before it gets ErrInFlight;
	// at least 1ms. Defaults to 2s.
	InFlightWait time.Duration
	// RetryAfter is the retry hint of the InFlightError of transactional
	// mode. Defaults to 1s.
	RetryAfter time.Duration
	// MeterProvider receives the metrics of Do, in this store and in the
	// copies WithDB makes (docs/idempotency.md, "Metrics"). Defaults to
	// none: nothing is recorded.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span for each Do. Defaults to none.
	TracerProvider trace.TracerProvider
}

func (c *PostgresConfig) withDefaults() PostgresConfig {
	var d PostgresConfig
	if c != nil {
		d = *c
	}
	k := d.keeping().withDefaults()
	d.Retention, d.TombstoneRetention, d.InFlightWait, d.RetryAfter = k.Retention, k.TombstoneRetention, k.InFlightWait, k.RetryAfter
	return d
}

func (c PostgresConfig) keeping() keeping {
	return keeping{c.Retention, c.TombstoneRetention, c.InFlightWait, c.RetryAfter}
}

func (c PostgresConfig) validate() error {
	if err := c.Tables.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return c.keeping().validate()
}

// Postgres keeps idempotency records in PostgreSQL. Expiry is decided by the
// database's clock (clock_timestamp()), never the client's. It is safe for
// concurrent use; the zero value is not usable: call NewPostgres.
//
// Transactional mode is Do (in a transaction of its own, or in the caller's:
// WithDB(tx).Do); leased mode is the LeaseStore methods, driven by a Leased;
// ReadFenced, PutFenced and DropFenced serve the fenced twin; Lookup and
// Purge serve everyone.
type Postgres struct {
	db     DB
	cfg    PostgresConfig
	tables migrate.Names
	sql    *pgStatements // shared by the copies WithDB makes
	tel    *execTelemetry
}

// pgStatements are a store's statements, rendered once for its Tables.
type pgStatements struct {
	tx     txStatements
	leased leasedStatements
	fenced fencedStatements
	purge  purgeStatements
	lookup string
}

// NewPostgres returns a store on db; the schema must have been migrated
// (Migrations). A nil cfg means the defaults. A nil db or a bad cfg give an
// error matching ErrInvalid (and migrate.ErrInvalidName for Tables). It does
// no I/O.
func NewPostgres(db TxDB, cfg *PostgresConfig) (*Postgres, error) {
	if nilDB(db) {
		return nil, fmt.Errorf("%w: nil DB", ErrInvalid)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	r := func(s string) string { return migrate.Render(s, c.Tables) }
	sql := &pgStatements{tx: renderTx(r), leased: renderLeased(r), fenced: renderFenced(r),
		purge: renderPurge(r), lookup: r(sqlLookup)}
	return &Postgres{db: db, cfg: c, tables: c.Tables, sql: sql, tel: newTelemetry(c.MeterProvider, c.TracerProvider, "transactional")}, nil
}

// nilDB reports a nil db, including the nil pointers of the usual
// implementations, which would otherwise fail only on first use.
func nilDB(db DB) bool {
	switch db := db.(type) {
	case nil:
		return true
	case *pgxpool.Pool:
		return db == nil
	case *pgx.Conn:
		return db == nil
	}
	return false
}

// WithDB returns a copy of the store whose statements run on db, with the
// same configuration. On the caller's transaction (a pgx.Tx), Do claims the
// key in that transaction and runs fn in it; Checkpoint records a recovery
// point atomically with the step's own writes. A nil db gives a copy that
// fails every operation with ErrInvalid.
func (p *Postgres) WithDB(db DB) *Postgres {
	c := *p
	c.db = db
	return &c
}

// usable reports a store without a DB (WithDB(nil)).
func (p *Postgres) usable() error {
	if nilDB(p.db) {
		return fmt.Errorf("%w: nil DB", ErrInvalid)
	}
	return nil
}

// The columns every lookup reads, in scanRecord's order. The state is
// computed on the database's clock: a running record with a live lease is
// running, anything past its retention is expired.
const (
	lookupColumns = `fingerprint, token, recovery_point, COALESCE(status, 0), header, body,
		CASE WHEN isfinite(lease_expires_at) THEN lease_expires_at END, expires_at,
		CASE WHEN state = 'tombstone' THEN 3
		     WHEN state = 'running' AND (lease_expires_at IS NULL OR lease_expires_at > clock_timestamp()) THEN 1
		     WHEN expires_at <= clock_timestamp() THEN 3
		     WHEN state = 'done' THEN 2
		     ELSE 1 END,
		GREATEST(CASE WHEN isfinite(lease_expires_at) THEN extract(epoch FROM lease_expires_at - clock_timestamp()) ELSE 0 END, 0)::float8`
	sqlLookup = `SELECT ` + lookupColumns + ` FROM {{idempotency_keys}} WHERE tenant = $1 AND key = $2`
)

// Lookup returns key's record; found is false when there is none.
func (p *Postgres) Lookup(ctx context.Context, key Key) (Record, bool, error) {
	if err := key.Validate(); err != nil {
		return Record{}, false, err
	}
	if err := p.usable(); err != nil {
		return Record{}, false, err
	}
	rec, found, err := scanRecord(p.db.QueryRow(ctx, p.sql.lookup, key.Tenant, key.ID), key)
	if err != nil {
		return Record{}, false, fmt.Errorf("idempotency: lookup %s: %w", key, err)
	}
	return rec, found, nil
}

// retention is the store's Retention as a statement argument.
func (p *Postgres) retention() int64 { return p.cfg.Retention.Microseconds() }

// lockKey is the advisory lock that serialises the transactional executions
// of key in this store's table: a 64-bit hash of the key, in the bigint
// space of pg_advisory_xact_lock (an application's own advisory locks would
// have to hit the same hash to contend with it). The statements that take it
// mix in the table's OID (tableOID): the name alone, without a Schema, is
// the same in every schema of the database.
func (p *Postgres) lockKey(key Key) int64 {
	sum := sha256.Sum256(lengthPrefixed([]byte(key.Tenant), []byte(key.ID)))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// encodeHeader encodes h for the header column: a JSON object of arrays of
// values. jsonb holds Unicode text without NUL only, and a header value may
// hold any byte (HTTP allows 0x80-0xFF), so a value that is not UTF-8 or
// holds a NUL is stored as {"b64": base64} instead of a string and comes
// back byte for byte. A header without values keeps its name.
func encodeHeader(h http.Header) (any, error) {
	if len(h) == 0 {
		return nil, nil
	}
	enc := make(map[string][]any, len(h))
	for name, values := range h {
		if !jsonText(name) {
			return nil, fmt.Errorf("%w: header name %s is not UTF-8 without NUL", ErrInvalid, short.Quote(name))
		}
		vs := make([]any, len(values))
		for i, v := range values {
			if jsonText(v) {
				vs[i] = v
			} else {
				vs[i] = binaryValue{B64: base64.StdEncoding.EncodeToString([]byte(v))}
			}
		}
		enc[name] = vs
	}
	b, err := json.Marshal(enc)
	if err != nil {
		return nil, fmt.Errorf("idempotency: encode header: %w", err)
	}
	return string(b), nil
}

// binaryValue is a header value that jsonb cannot hold as a string.
type binaryValue struct {
	B64 string `json:"b64"`
}

// jsonText reports whether jsonb stores s as a string unchanged.
func jsonText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// decodeHeader is the inverse of encodeHeader.
func decodeHeader(b []byte) (http.Header, error) {
	var enc map[string][]json.RawMessage
	if err := json.Unmarshal(b, &enc); err != nil {
		return nil, err
	}
	h := make(http.Header, len(enc))
	for name, values := range enc {
		vs := make([]string, len(values))
		for i, raw := range values {
			v, err := decodeValue(raw)
			if err != nil {
				return nil, err
			}
			vs[i] = v
		}
		h[name] = vs
	}
	return h, nil
}

func decodeValue(raw json.RawMessage) (string, error) {
	var s string
	if raw = bytes.TrimSpace(raw); len(raw) > 0 && raw[0] == '"' {
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var bv binaryValue
	if err := json.Unmarshal(raw, &bv); err != nil {
		return "", err
	}
	v, err := base64.StdEncoding.DecodeString(bv.B64)
	return string(v), err
}

// scanRecord reads one row of lookupColumns; extra receives the columns a
// statement returns before them. No row is found false, not an error.
func scanRecord(row pgx.Row, key Key, extra ...any) (Record, bool, error) {
	var (
		rec          = Record{Key: key}
		fp, header   []byte
		status       int32
		leaseExpires *time.Time
		state        int
		leaseLeft    float64
	)
	dest := append(extra, &fp, &rec.Token, &rec.RecoveryPoint, &status, &header, &rec.Result.Body,
		&leaseExpires, &rec.Expires, &state, &leaseLeft)
	err := row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	copy(rec.Fingerprint[:], fp)
	rec.State = State(state)
	rec.leaseLeft = time.Duration(leaseLeft * float64(time.Second))
	if leaseExpires != nil {
		rec.LeaseExpires = *leaseExpires
	}
	if rec.State != Done {
		rec.Result = Result{}
		return rec, true, nil
	}
	rec.Result.Status = int(status)
	if len(header) > 0 {
		if rec.Result.Header, err = decodeHeader(header); err != nil {
			return Record{}, false, fmt.Errorf("idempotency: decode header of %s: %w", key, err)
		}
	}
	return rec, true, nil
}
