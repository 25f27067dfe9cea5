package idempotency

import (
	"bytes"
	"context"
	"embed"
	"encoding/base64"
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

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the schema of the PostgreSQL backend, for migrate.Up
// and migrate.Print (or `lockfree migrate`).
func Migrations() []migrate.Migration {
	return migrate.FromDir("idempotency", migrationFiles, "migrations")
}

// DB is what the PostgreSQL backend needs from a connection:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Postgres keeps idempotency records in PostgreSQL. Expiry is decided by the
// database's clock (clock_timestamp()), never the client's. It is safe for
// concurrent use.
//
// Transactional mode is DoTx (in the caller's transaction) and Do (in a
// transaction of its own); leased mode is the LeaseStore methods, driven by
// a Leased; Lookup and PutFenced serve the fenced twin.
type Postgres struct {
	db  DB
	cfg Config
	sql struct {
		savepoint, restoreTimeout, release, rollback, lookupRestore            string
		claimTx, completeTx, completeCommit, abandonTx                         string
		ensure, takeover, lookup, renew, checkpoint, complete, release2, token string
		putFenced, tombstone, deleteTombstones                                 string
	}
}

// NewPostgres returns a store on db; the schema must have been migrated
// (Migrations). A nil cfg means the zero Config. A nil db is an error
// matching ErrInvalid.
func NewPostgres(db DB, cfg *Config) (*Postgres, error) {
	if nilDB(db) {
		return nil, fmt.Errorf("%w: nil DB", ErrInvalid)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Postgres{db: db, cfg: c}
	r := func(s string) string { return migrate.Render(s, c.Tables) }
	ret := fmt.Sprintf("clock_timestamp() + %d * interval '1 microsecond'", c.Retention.Microseconds())
	const where = `WHERE tenant = $1 AND key = $2`

	// The claim of transactional mode is one statement that sets a bounded
	// lock_timeout for its own wait and restores the caller's afterwards:
	// the source row's condition saves the caller's value in a custom
	// setting and sets the bound (the saving call is an argument of the
	// setting one, contributing '', so it runs first), before the row is
	// inserted; RETURNING restores it once the row is in. A concurrent
	// claim of the same key waits in between, on the unique index, until
	// the first transaction ends. A claim that inserts nothing returns no
	// row: the lookup that follows it restores the setting.
	//
	// The row is inserted as done: nobody else can see it before the
	// transaction commits, and by then the work is done too. The result is
	// added by completeTx (skipped for an empty result, which saves a
	// statement); a failed execution deletes the row or rolls back.
	//
	// In the caller's transaction the claim runs inside a savepoint, so that
	// a wait that times out rolls back to the savepoint instead of aborting
	// the transaction.
	p.sql.savepoint = `SAVEPOINT lockfree_idempotency_claim`
	p.sql.release = `RELEASE SAVEPOINT lockfree_idempotency_claim`
	p.sql.rollback = `ROLLBACK TO SAVEPOINT lockfree_idempotency_claim`
	const restore = `set_config('lock_timeout', current_setting('lockfree.idempotency_lock_timeout'), true)`
	p.sql.restoreTimeout = `SELECT ` + restore
	p.sql.claimTx = r(`INSERT INTO {{idempotency_keys}} (tenant, key, fingerprint, state, created_at, expires_at)
		SELECT $1, $2, $3, 'done', clock_timestamp(), ` + ret + `
		WHERE set_config('lock_timeout', $4 || left(set_config('lockfree.idempotency_lock_timeout', current_setting('lock_timeout'), true), 0), true) IS NOT NULL
		ON CONFLICT (tenant, key) DO NOTHING
		RETURNING ` + restore)
	p.sql.completeTx = r(`UPDATE {{idempotency_keys}} SET status = $3, header = $4, body = $5
		` + where + ` AND state = 'done' AND token = 0`)
	// completeCommit is completeTx for the batch that ends with COMMIT: a
	// missing claim (fn removed it through the transaction) must not let
	// the COMMIT queued behind it go through, so it fails the statement
	// (division by zero), which aborts the transaction: the server then
	// skips the COMMIT.
	p.sql.completeCommit = r(`WITH stored AS (
			UPDATE {{idempotency_keys}} SET status = $3, header = $4, body = $5
			` + where + ` AND state = 'done' AND token = 0 RETURNING 1)
		SELECT 1 / count(*) FROM stored`)
	p.sql.abandonTx = r(`DELETE FROM {{idempotency_keys}} ` + where + ` AND state = 'done' AND token = 0`)

	// Leased mode. ensure gives a new key a running record with no token
	// and an expired lease, so that the token is always minted by takeover,
	// after it holds the row lock (as in fencedlock).
	p.sql.ensure = r(`INSERT INTO {{idempotency_keys}} (tenant, key, fingerprint, state, token, lease_expires_at, created_at, expires_at)
		VALUES ($1, $2, $3, 'running', 0, '-infinity', clock_timestamp(), ` + ret + `) ON CONFLICT (tenant, key) DO NOTHING`)
	p.sql.takeover = r(`UPDATE {{idempotency_keys}}
		SET token = nextval({{regclass idempotency_tokens}}), lease_expires_at = clock_timestamp() + $4 * interval '1 microsecond'
		` + where + ` AND fingerprint = $3 AND state = 'running' AND lease_expires_at <= clock_timestamp()
		  AND expires_at > clock_timestamp()
		RETURNING token, lease_expires_at, recovery_point`)
	lookupCols := `fingerprint, token, recovery_point, COALESCE(status, 0), header, body,
		CASE WHEN isfinite(lease_expires_at) THEN lease_expires_at END, expires_at,
		CASE WHEN state = 'tombstone' THEN 3
		     WHEN state = 'running' AND (lease_expires_at IS NULL OR lease_expires_at > clock_timestamp()) THEN 1
		     WHEN expires_at <= clock_timestamp() THEN 3
		     WHEN state = 'done' THEN 2
		     ELSE 1 END,
		GREATEST(COALESCE(extract(epoch FROM lease_expires_at - clock_timestamp()), 0), 0)::float8`
	p.sql.lookup = r(`SELECT ` + lookupCols + ` FROM {{idempotency_keys}} ` + where)
	// lookupRestore is the lookup after a claim that inserted nothing, which
	// also restores the caller's lock_timeout, sparing a statement. It does
	// so only when it finds the record: the claim restores it itself when
	// not.
	p.sql.lookupRestore = r(`SELECT ` + lookupCols + `,
		set_config('lock_timeout', current_setting('lockfree.idempotency_lock_timeout'), true)
		FROM {{idempotency_keys}} ` + where)
	p.sql.renew = r(`UPDATE {{idempotency_keys}} SET lease_expires_at = clock_timestamp() + $4 * interval '1 microsecond'
		` + where + ` AND token = $3 AND state = 'running' AND lease_expires_at > clock_timestamp()
		RETURNING lease_expires_at`)
	p.sql.checkpoint = r(`UPDATE {{idempotency_keys}} SET recovery_point = $4 ` + where + ` AND token = $3 AND state = 'running'`)
	p.sql.complete = r(`UPDATE {{idempotency_keys}} SET state = 'done', status = $4, header = $5, body = $6,
		lease_expires_at = NULL, expires_at = ` + ret + ` ` + where + ` AND token = $3 AND state = 'running'`)
	p.sql.release2 = r(`WITH deleted AS (
			DELETE FROM {{idempotency_keys}} ` + where + ` AND token = $3 AND state = 'running' AND recovery_point = ''
			RETURNING 1),
		ended AS (
			UPDATE {{idempotency_keys}} SET lease_expires_at = clock_timestamp()
			` + where + ` AND token = $3 AND state = 'running' AND recovery_point <> ''
			RETURNING 1)
		SELECT (SELECT count(*) FROM deleted) + (SELECT count(*) FROM ended)`)
	p.sql.token = r(`SELECT token FROM {{idempotency_keys}} ` + where)

	p.sql.putFenced = r(`INSERT INTO {{idempotency_keys}} AS k (tenant, key, fingerprint, state, token, status, header, body, created_at, expires_at)
		VALUES ($1, $2, $3, 'done', $4, $5, $6, $7, clock_timestamp(), ` + ret + `)
		ON CONFLICT (tenant, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, state = 'done', token = EXCLUDED.token,
			status = EXCLUDED.status, header = EXCLUDED.header, body = EXCLUDED.body, lease_expires_at = NULL,
			recovery_point = '', expires_at = EXCLUDED.expires_at
		WHERE k.token <= EXCLUDED.token`)

	p.sql.tombstone = r(`UPDATE {{idempotency_keys}} SET state = 'tombstone', status = NULL, header = NULL, body = NULL,
			recovery_point = '', lease_expires_at = NULL
		WHERE (tenant, key) IN (SELECT tenant, key FROM {{idempotency_keys}}
			WHERE state <> 'tombstone' AND expires_at <= clock_timestamp()
			  AND (state <> 'running' OR lease_expires_at <= clock_timestamp())
			ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`)
	p.sql.deleteTombstones = r(`DELETE FROM {{idempotency_keys}}
		WHERE (tenant, key) IN (SELECT tenant, key FROM {{idempotency_keys}}
			WHERE state = 'tombstone' AND expires_at <= clock_timestamp() - $2 * interval '1 microsecond'
			ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`)
	return p, nil
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

// WithDB returns a store that runs its statements on db — typically the
// caller's transaction, e.g. to record a Checkpoint atomically with the
// step's own writes — with the same configuration.
func (p *Postgres) WithDB(db DB) *Postgres {
	c := *p
	c.db = db
	return &c
}

type txKey struct{}

// TxFrom returns the transaction in which Postgres.Do or DoTx runs its
// function, for the function's own writes.
func TxFrom(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// Do runs fn at most once per key in a transaction of its own (available
// to fn through TxFrom, and valid only until fn returns), as DoTx describes,
// and commits it. It implements Executor. If the commit fails the result is
// not returned, and nothing is stored: a retry runs fn again (a commit whose
// acknowledgement was lost with the connection may still have committed: the
// retry then replays).
//
// On a *pgxpool.Pool or a *pgx.Conn, Do costs the round trips of the bare
// transaction: BEGIN travels with the claim in one batch, and the result
// with COMMIT in another; a failed store aborts the transaction, so the
// COMMIT behind it is not executed. On any other DB (a pgx.Tx: the
// transaction is a savepoint) it begins, claims, stores and commits one
// statement batch at a time, as DoTx does.
func (p *Postgres) Do(ctx context.Context, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (Result, error) {
	if err := key.Validate(); err != nil {
		return Result{}, err
	}
	switch db := p.db.(type) {
	case acquirer:
		c, err := db.Acquire(ctx)
		if err != nil {
			return Result{}, fmt.Errorf("idempotency: acquire a connection: %w", err)
		}
		// Release destroys a connection left in a transaction.
		defer c.Release()
		return p.doPipelined(ctx, c.Conn(), key, fp, fn)
	case *pgx.Conn:
		return p.doPipelined(ctx, db, key, fp, fn)
	}
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("idempotency: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	res, err := p.DoTx(ctx, tx, key, fp, fn)
	if err != nil {
		return Result{}, err
	}
	if res.Replayed {
		return res, nil // nothing was written
	}
	if c := tx.Conn(); c != nil && c.PgConn().TxStatus() != 'T' {
		st := c.PgConn().TxStatus()
		// Aborted by a failed statement of fn: a nested transaction's
		// failed commit (RELEASE SAVEPOINT) would close it without rolling
		// back to the savepoint.
		return Result{}, fmt.Errorf("idempotency: commit %s: the transaction is not open (status %q)", key, st)
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, fmt.Errorf("idempotency: commit %s: %w", key, err)
	}
	return res, nil
}

// acquirer is a connection pool (*pgxpool.Pool): Do takes a connection of
// its own from it, to pipeline BEGIN and COMMIT.
type acquirer interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// doPipelined is Do on a connection of its own. The claim needs no
// savepoint here: a claim that fails (the bounded wait ended) rolls back
// the whole transaction, which holds nothing else yet.
func (p *Postgres) doPipelined(ctx context.Context, conn *pgx.Conn, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (Result, error) {
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	b.Queue(p.sql.claimTx, key.Tenant, key.ID, fp[:], p.inFlightWait())
	br := conn.SendBatch(ctx, &b)
	tx := br.Tx()
	// Whatever happens below, the connection leaves Do outside a
	// transaction: rolled back unless the COMMIT went through. A broken
	// connection makes the rollback fail, and pgx closes it.
	defer func() {
		if conn.PgConn().TxStatus() != 'I' {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	_, err := br.Exec() // BEGIN
	took := false
	if err == nil {
		var restored string
		err = br.QueryRow().Scan(&restored)
		took = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Result{}, p.claimError(ctx, key, err)
	}
	if !took {
		// A replay (one more round trip: the claim is built for the first
		// execution), a conflict or an error.
		rec, found, err := p.lookupAfterClaim(ctx, tx, key)
		if err != nil {
			return Result{}, p.claimError(ctx, key, err)
		}
		res, err := p.claimed(ctx, tx, key, fp, rec, found)
		if err != nil {
			return Result{}, err
		}
		if res != nil {
			return *res, nil // nothing was written; the rollback ends it
		}
	}

	res, err := fn(context.WithValue(ctx, txKey{}, tx))
	if err != nil {
		return Result{}, err // the rollback removes the claim with fn's writes
	}
	res.Replayed = false
	if conn.PgConn().TxStatus() != 'T' {
		// fn committed, rolled back or broke the transaction.
		return Result{}, fmt.Errorf("idempotency: complete %s: the transaction is no longer open (status %q)", key, conn.PgConn().TxStatus())
	}
	var cb pgx.Batch
	store := res.Status != 0 || len(res.Header) > 0 || len(res.Body) > 0
	if store {
		header, err := encodeHeader(res.Header)
		if err != nil {
			return Result{}, err
		}
		cb.Queue(p.sql.completeCommit, key.Tenant, key.ID, res.Status, header, res.Body)
	}
	cb.Queue("commit")
	cbr := conn.SendBatch(ctx, &cb)
	var tag pgconn.CommandTag
	if store {
		_, err = cbr.Exec()
	}
	if err == nil {
		tag, err = cbr.Exec()
	}
	if cerr := cbr.Close(); err == nil {
		err = cerr
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "22012":
		return Result{}, fmt.Errorf("idempotency: complete %s: the claim is gone (removed through the transaction?); nothing committed", key)
	case err != nil:
		return Result{}, fmt.Errorf("idempotency: complete and commit %s: %w", key, err)
	case tag.String() != "COMMIT":
		return Result{}, fmt.Errorf("idempotency: commit %s: %w", key, pgx.ErrTxCommitRollback)
	}
	return res, nil
}

func (p *Postgres) inFlightWait() string {
	return fmt.Sprintf("%dms", max(1, p.cfg.InFlightWait.Milliseconds()))
}

// claimed decides a claim that inserted nothing, from the record read in
// the same batch: a replay (res set) or an error. When the record vanished
// between the insert and the read (a failed first execution removed its
// claim), it claims again in tx, and returns nil, nil once it holds the key.
func (p *Postgres) claimed(ctx context.Context, tx pgx.Tx, key Key, fp Fingerprint, rec Record, found bool) (*Result, error) {
	for attempt := 0; ; attempt++ {
		if found {
			return classify(rec, fp, p.cfg.RetryAfter)
		}
		if attempt == 3 {
			return nil, &InFlightError{Key: key, RetryAfter: p.cfg.RetryAfter}
		}
		var took bool
		var err error
		took, rec, found, err = p.claimTx(ctx, tx, key, fp)
		if err != nil {
			return nil, err
		}
		if took {
			return nil, nil
		}
	}
}

// DoTx is transactional mode inside the caller's transaction tx: it claims
// key in tx (INSERT … ON CONFLICT DO NOTHING, then read), runs fn — which
// must do its writes in tx (TxFrom returns it) — and stores fn's result in
// tx. The claim and the result become visible together when the caller
// commits, and vanish together if tx rolls back, so no lease exists that
// could expire while the work runs.
//
// A duplicate running concurrently waits on the unique index until the first
// transaction ends, for at most Config.InFlightWait (a lock_timeout set only
// for the claim); then it gets an *InFlightError, and tx is still usable: the
// claim runs in a savepoint that the timeout rolls back. When the first
// transaction has committed, the duplicate gets the stored result with
// Replayed set and nothing written. The claim also returns ErrKeyReused,
// ErrExpired or ErrInvalid without running fn.
//
// An empty Result (no Status, Header or Body) is stored by the claim itself,
// which saves the statement that stores a result.
//
// DoTx costs the caller's transaction one round trip for the claim (two when
// the key was taken already) and, for a non-empty result, one to store it;
// Do, in a transaction of its own, sends these with BEGIN and COMMIT.
//
// When fn fails, DoTx removes the claim and returns fn's error; the caller
// should roll tx back, which also undoes fn's own writes. Under REPEATABLE
// READ or SERIALIZABLE a concurrent completion surfaces as a serialization
// failure (SQLSTATE 40001): roll back and retry, and the retry replays.
func (p *Postgres) DoTx(ctx context.Context, tx pgx.Tx, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (Result, error) {
	if err := key.Validate(); err != nil {
		return Result{}, err
	}
	if tx == nil {
		return Result{}, fmt.Errorf("%w: nil transaction", ErrInvalid)
	}
	took, rec, found, err := p.claimTx(ctx, tx, key, fp)
	if err != nil {
		return Result{}, err
	}
	if !took {
		res, err := p.claimed(ctx, tx, key, fp, rec, found)
		if err != nil {
			return Result{}, err
		}
		if res != nil {
			return *res, nil
		}
	}

	res, err := fn(context.WithValue(ctx, txKey{}, tx))
	if err != nil {
		if _, derr := tx.Exec(context.WithoutCancel(ctx), p.sql.abandonTx, key.Tenant, key.ID); derr != nil {
			return Result{}, errors.Join(err, fmt.Errorf("idempotency: abandon %s: %w", key, derr))
		}
		return Result{}, err
	}
	res.Replayed = false
	if res.Status == 0 && len(res.Header) == 0 && len(res.Body) == 0 {
		return res, nil
	}
	header, err := encodeHeader(res.Header)
	if err != nil {
		return Result{}, err
	}
	tag, err := tx.Exec(ctx, p.sql.completeTx, key.Tenant, key.ID, res.Status, header, res.Body)
	if err != nil {
		return Result{}, fmt.Errorf("idempotency: complete %s: %w", key, err)
	}
	if tag.RowsAffected() != 1 {
		return Result{}, fmt.Errorf("idempotency: complete %s: the claim is gone (removed through the transaction?); roll back", key)
	}
	return res, nil
}

// claimTx claims key in the caller's transaction tx, inside a savepoint, and
// reads the record when the key was taken already: one round trip.
func (p *Postgres) claimTx(ctx context.Context, tx pgx.Tx, key Key, fp Fingerprint) (took bool, rec Record, found bool, err error) {
	var b pgx.Batch
	b.Queue(p.sql.savepoint)
	b.Queue(p.sql.claimTx, key.Tenant, key.ID, fp[:], p.inFlightWait())
	b.Queue(p.sql.lookupRestore, key.Tenant, key.ID)
	b.Queue(p.sql.release)
	br := tx.SendBatch(ctx, &b)
	_, err = br.Exec() // savepoint
	if err == nil {
		var restored string
		err = br.QueryRow().Scan(&restored)
		took = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if err == nil {
		var restored string
		rec, found, err = scanRecord(br.QueryRow(), key, &restored)
	}
	if err == nil {
		_, err = br.Exec() // release
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && !took && !found {
		_, err = tx.Exec(ctx, p.sql.restoreTimeout) // neither statement did
	}
	if err != nil {
		// Undo the savepoint (and with it the lock_timeout) so that tx
		// stays usable; a broken connection makes this fail too, which is
		// reported with the cause.
		bctx := context.WithoutCancel(ctx)
		if _, rerr := tx.Exec(bctx, p.sql.rollback+"; "+p.sql.release); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return false, Record{}, false, p.claimError(ctx, key, err)
	}
	return took, rec, found, nil
}

// lookupAfterClaim reads the record after a claim that inserted nothing,
// and restores the caller's lock_timeout.
func (p *Postgres) lookupAfterClaim(ctx context.Context, tx pgx.Tx, key Key) (Record, bool, error) {
	var restored string
	rec, found, err := scanRecord(tx.QueryRow(ctx, p.sql.lookupRestore, key.Tenant, key.ID), key, &restored)
	if err == nil && !found {
		_, err = tx.Exec(ctx, p.sql.restoreTimeout)
	}
	return rec, found, err
}

// claimError turns a failed claim into Do's answer: an *InFlightError when
// the bounded wait for a concurrent execution ended.
func (p *Postgres) claimError(ctx context.Context, key Key, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "57014") && ctx.Err() == nil {
		// lock_not_available / query_canceled: the bounded wait ended.
		return &InFlightError{Key: key, RetryAfter: p.cfg.RetryAfter}
	}
	if ctx.Err() != nil {
		return errors.Join(context.Cause(ctx), err)
	}
	return fmt.Errorf("idempotency: claim %s: %w", key, err)
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
			if raw = bytes.TrimSpace(raw); len(raw) > 0 && raw[0] == '"' {
				if err := json.Unmarshal(raw, &vs[i]); err != nil {
					return nil, err
				}
				continue
			}
			var bv binaryValue
			if err := json.Unmarshal(raw, &bv); err != nil {
				return nil, err
			}
			v, err := base64.StdEncoding.DecodeString(bv.B64)
			if err != nil {
				return nil, err
			}
			vs[i] = string(v)
		}
		h[name] = vs
	}
	return h, nil
}

// scanRecord reads one row of the lookup query.
// extra receives the columns a query adds after the record's.
func scanRecord(row pgx.Row, key Key, extra ...any) (Record, bool, error) {
	var (
		rec          = Record{Key: key}
		fp, header   []byte
		status       int32
		leaseExpires *time.Time
		state        int
		leaseLeft    float64
	)
	dest := append([]any{&fp, &rec.Token, &rec.RecoveryPoint, &status, &header, &rec.Result.Body,
		&leaseExpires, &rec.Expires, &state, &leaseLeft}, extra...)
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
	if rec.State == Done {
		rec.Result.Status = int(status)
		if len(header) > 0 {
			if rec.Result.Header, err = decodeHeader(header); err != nil {
				return Record{}, false, fmt.Errorf("idempotency: decode header of %s: %w", key, err)
			}
		}
	} else {
		rec.Result = Result{}
	}
	return rec, true, nil
}

// Claim implements LeaseStore. It runs its statements in one round trip.
func (p *Postgres) Claim(ctx context.Context, key Key, fp Fingerprint, ttl time.Duration) (Lease, *Result, error) {
	if err := validClaim(key, ttl); err != nil {
		return Lease{}, nil, err
	}
	for attempt := 0; ; attempt++ {
		sent := time.Now()
		var b pgx.Batch
		b.Queue(p.sql.ensure, key.Tenant, key.ID, fp[:])
		b.Queue(p.sql.takeover, key.Tenant, key.ID, fp[:], ttl.Microseconds())
		b.Queue(p.sql.lookup, key.Tenant, key.ID)
		br := p.db.SendBatch(ctx, &b)
		l := Lease{Key: key, TTL: ttl, sent: sent}
		_, err := br.Exec()
		var took bool
		if err == nil {
			err = br.QueryRow().Scan(&l.Token, &l.Expires, &l.RecoveryPoint)
			took = err == nil
			if errors.Is(err, pgx.ErrNoRows) {
				err = nil
			}
		}
		var rec Record
		var found bool
		if err == nil {
			rec, found, err = scanRecord(br.QueryRow(), key)
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return Lease{}, nil, fmt.Errorf("idempotency: claim %s: %w", key, err)
		}
		if took {
			return l, nil, nil
		}
		// Missed: the lease is current, the key is done, expired or bound
		// to another fingerprint — or the record changed between the
		// statements (released, or its lease ran out just now): look again.
		raced := !found || (rec.State == Running && rec.Fingerprint == fp && rec.leaseLeft == 0 && !rec.LeaseExpires.IsZero())
		if !raced {
			res, err := classify(rec, fp, p.cfg.RetryAfter)
			return Lease{}, res, err
		}
		if attempt == 3 {
			return Lease{}, nil, &InFlightError{Key: key, RetryAfter: p.cfg.RetryAfter}
		}
	}
}

// superseded reports why a compare-and-set on l's token missed.
func (p *Postgres) superseded(ctx context.Context, l Lease) error {
	var cur int64
	err := p.db.QueryRow(ctx, p.sql.token, l.Key.Tenant, l.Key.ID).Scan(&cur)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("idempotency: token of %s: %w", l.Key, err)
	}
	return &SupersededError{Key: l.Key, Presented: l.Token, Current: cur}
}

// Renew implements LeaseStore.
func (p *Postgres) Renew(ctx context.Context, l Lease) (Lease, error) {
	if err := validLease(l); err != nil {
		return Lease{}, err
	}
	sent := time.Now()
	err := p.db.QueryRow(ctx, p.sql.renew, l.Key.Tenant, l.Key.ID, l.Token, l.TTL.Microseconds()).Scan(&l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		serr := p.superseded(ctx, l)
		var s *SupersededError
		if errors.As(serr, &s) && s.Current == l.Token {
			return Lease{}, fmt.Errorf("%w: lease %d of %s expired", ErrLeaseLost, l.Token, l.Key)
		}
		return Lease{}, serr
	}
	if err != nil {
		return Lease{}, fmt.Errorf("idempotency: renew %s: %w", l.Key, err)
	}
	l.sent = sent
	return l, nil
}

// Checkpoint implements LeaseStore. Run it on the transaction of the step's
// own writes (WithDB) to record both atomically.
func (p *Postgres) Checkpoint(ctx context.Context, l Lease, step string) error {
	if err := validLease(l); err != nil {
		return err
	}
	if err := validStep(step); err != nil {
		return err
	}
	tag, err := p.db.Exec(ctx, p.sql.checkpoint, l.Key.Tenant, l.Key.ID, l.Token, step)
	if err != nil {
		return fmt.Errorf("idempotency: checkpoint %s: %w", l.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return p.superseded(ctx, l)
	}
	return nil
}

// Complete implements LeaseStore.
func (p *Postgres) Complete(ctx context.Context, l Lease, r Result) error {
	if err := validLease(l); err != nil {
		return err
	}
	header, err := encodeHeader(r.Header)
	if err != nil {
		return err
	}
	tag, err := p.db.Exec(ctx, p.sql.complete, l.Key.Tenant, l.Key.ID, l.Token, r.Status, header, r.Body)
	if err != nil {
		return fmt.Errorf("idempotency: complete %s: %w", l.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return p.superseded(ctx, l)
	}
	return nil
}

// Release implements LeaseStore.
func (p *Postgres) Release(ctx context.Context, l Lease) error {
	if err := validLease(l); err != nil {
		return err
	}
	var n int64
	if err := p.db.QueryRow(ctx, p.sql.release2, l.Key.Tenant, l.Key.ID, l.Token).Scan(&n); err != nil {
		return fmt.Errorf("idempotency: release %s: %w", l.Key, err)
	}
	if n == 0 {
		return p.superseded(ctx, l)
	}
	return nil
}

// Lookup implements FencedStore.
func (p *Postgres) Lookup(ctx context.Context, key Key) (Record, bool, error) {
	if err := key.Validate(); err != nil {
		return Record{}, false, err
	}
	rec, found, err := scanRecord(p.db.QueryRow(ctx, p.sql.lookup, key.Tenant, key.ID), key)
	if err != nil {
		return Record{}, false, fmt.Errorf("idempotency: lookup %s: %w", key, err)
	}
	return rec, found, nil
}

// PutFenced implements FencedStore.
func (p *Postgres) PutFenced(ctx context.Context, key Key, fp Fingerprint, token int64, r Result) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if token <= 0 {
		return fmt.Errorf("%w: fencing token %d", ErrInvalid, token)
	}
	header, err := encodeHeader(r.Header)
	if err != nil {
		return err
	}
	tag, err := p.db.Exec(ctx, p.sql.putFenced, key.Tenant, key.ID, fp[:], token, r.Status, header, r.Body)
	if err != nil {
		return fmt.Errorf("idempotency: fenced put %s: %w", key, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	var cur int64
	if err := p.db.QueryRow(ctx, p.sql.token, key.Tenant, key.ID).Scan(&cur); err != nil {
		return fmt.Errorf("idempotency: fenced put %s: %w", key, err)
	}
	return &fencedlock.FencedError{Presented: token, Required: cur}
}

// Purge turns up to limit expired records into tombstones (dropping their
// results; the key stays spent, so a late retry gets ErrExpired) and then
// deletes tombstones older than Config.TombstoneRetention, up to limit
// records in all, and returns how many it changed. Call it in a loop until it
// returns less than limit; records locked by a running claim are skipped,
// not waited for.
func (p *Postgres) Purge(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: purge limit %d", ErrInvalid, limit)
	}
	tag, err := p.db.Exec(ctx, p.sql.tombstone, limit)
	if err != nil {
		return 0, fmt.Errorf("idempotency: purge: %w", err)
	}
	n := tag.RowsAffected()
	if n == int64(limit) {
		return n, nil
	}
	tag, err = p.db.Exec(ctx, p.sql.deleteTombstones, int64(limit)-n, p.cfg.TombstoneRetention.Microseconds())
	if err != nil {
		return n, fmt.Errorf("idempotency: purge: %w", err)
	}
	return n + tag.RowsAffected(), nil
}
