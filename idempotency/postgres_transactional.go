package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/migrate"
)

// Transactional mode on PostgreSQL.
//
// Every execution of a key first takes the key's transaction-scoped advisory
// lock (Postgres.lockKey), so that executions of one key in flight run one
// after the other: a duplicate waits for the first transaction to end, for at
// most InFlightWait, and then reads the record it committed. The lock is
// tried first without waiting (sqlTryLock): only a duplicate pays for the
// bounded wait (sqlWaitLock), which sets lock_timeout for the wait alone and
// gives the caller's value back in the same statement. The lock makes the
// waiting; the primary key of the record makes the guarantee: whatever
// happens to the lock, a second record of a key cannot commit.
//
// In a transaction of its own, Do reads the record after the lock (one
// batch with BEGIN) and, for a first execution, inserts it with its result
// at the end (one batch with COMMIT): the round trips of the bare
// transaction, one insert, no update. In the caller's transaction, whose
// COMMIT is not Do's to send, the claim inserts the record (done, without a
// result) up front, so that a result-less execution needs no statement
// after fn; a result is one update more.
const (
	sqlTryLock  = `SELECT pg_try_advisory_xact_lock($1::bigint # ` + tableOID + `)`
	sqlWaitLock = `SELECT set_config('lock_timeout',
		left(pg_advisory_xact_lock(($1::bigint # ` + tableOID + `) + 0 * length(set_config('lock_timeout',
			$2 || left(set_config('lockfree.idempotency_lock_timeout', current_setting('lock_timeout'), true), 0), true)))::text, 0)
		|| current_setting('lockfree.idempotency_lock_timeout'), true)`
	// tableOID is the records table's OID, mixed into the key's lock
	// (Postgres.lockKey) by the server: the table the statements find on
	// the connection's search_path, so that stores in two schemas of one
	// database never share a lock.
	tableOID  = `{{regclass idempotency_keys}}::regclass::oid::bigint`
	sqlRecord = `INSERT INTO {{idempotency_keys}} (tenant, key, fingerprint, state, status, header, body, created_at, expires_at)
		VALUES ($1, $2, $3, 'done', $4, $5, $6, clock_timestamp(), clock_timestamp() + $7 * interval '1 microsecond')`

	sqlSavepoint = `SAVEPOINT lockfree_idempotency`
	sqlRollback  = `ROLLBACK TO SAVEPOINT lockfree_idempotency`
	sqlRelease   = `RELEASE SAVEPOINT lockfree_idempotency`
	// sqlClaim tries the lock and, holding it, inserts the record or reads
	// the one that is there: it answers 1 (claimed), 2 (the lock is busy) or
	// 0 and the record. No row at all means that the record changed between
	// the insert and the read (they share the statement's snapshot).
	sqlClaim = `WITH lock AS (SELECT pg_try_advisory_xact_lock($4::bigint # ` + tableOID + `) AS held),
		claim AS (
			INSERT INTO {{idempotency_keys}} (tenant, key, fingerprint, state, created_at, expires_at)
			SELECT $1, $2, $3, 'done', clock_timestamp(), clock_timestamp() + $5 * interval '1 microsecond'
			FROM lock WHERE held
			ON CONFLICT (tenant, key) DO NOTHING
			RETURNING 1)
		SELECT 1, ` + noRecord + ` FROM claim
		UNION ALL
		SELECT 2, ` + noRecord + ` FROM lock WHERE NOT held
		UNION ALL
		SELECT 0, ` + lookupColumns + ` FROM {{idempotency_keys}}
		WHERE tenant = $1 AND key = $2 AND (SELECT held FROM lock) AND NOT EXISTS (SELECT FROM claim)`
	noRecord = `NULL::bytea, 0::bigint, '', 0, NULL::jsonb, NULL::bytea, NULL::timestamptz, clock_timestamp(), 0, 0::float8`
	// sqlComplete fails (SQLSTATE 22P02, naming the cause) when the claim
	// is gone, rather than answering zero rows: the failure keeps the
	// RELEASE queued behind it from running, so the savepoint survives and
	// the rollback to it can undo fn's writes.
	sqlComplete = `WITH done AS (
			UPDATE {{idempotency_keys}} SET status = $3, header = $4, body = $5
			WHERE tenant = $1 AND key = $2 AND state = 'done' AND token = 0
			RETURNING 1)
		SELECT CAST(CASE WHEN count(*) = 1 THEN '1' ELSE 'idempotency: the claim is gone' END AS int) FROM done`
)

// Unsafe variants for the mutant site idempotency.claim.conflict: the
// record of a key that has one already is written over, as if the key were
// new.
const (
	mutantRecord = sqlRecord + ` ON CONFLICT (tenant, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
		state = 'done', status = EXCLUDED.status, header = EXCLUDED.header, body = EXCLUDED.body`
	mutantClaimConflict = `DO UPDATE SET state = 'done', token = 0, status = NULL, header = NULL, body = NULL`
)

type txStatements struct {
	tryLock, waitLock, record, claim, complete string
}

func renderTx(r func(string) string) txStatements {
	return txStatements{tryLock: r(sqlTryLock), waitLock: r(sqlWaitLock), record: r(sqlRecord), claim: r(sqlClaim), complete: r(sqlComplete)}
}

// What a claim in the caller's transaction found: sqlClaim answers the
// first three, and no row at all when the record changed between its insert
// and its read.
const (
	claimFound = iota // the key has a record
	claimTaken        // the key is claimed
	claimBusy         // another transaction holds the key's lock
	claimRaced
)

type txKey struct{}

// TxFrom returns the transaction in which Postgres.Do runs its function, for
// the function's own writes; it is valid only until the function returns.
func TxFrom(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// Do runs fn at most once per key, in a transaction with the key's record,
// and implements Executor. fn finds the transaction with TxFrom and must do
// its writes in it: the claim, fn's writes and the result then commit
// together, or roll back together, so no lease exists that could expire
// while fn runs.
//
// On a *pgxpool.Pool or a *pgx.Conn, Do runs in a transaction of its own
// and commits it; it costs the round trips of the bare transaction: BEGIN
// travels with the claim, and the result with COMMIT. If the commit fails
// the result is not returned: a retry runs fn again, or replays when the
// commit went through and only its acknowledgement was lost.
//
// On a pgx.Tx (WithDB(tx), or NewPostgres(tx)), Do claims the key in that
// transaction and runs fn in it, inside a savepoint: when fn fails, or its
// result cannot be stored, everything Do and fn wrote is rolled back to the
// savepoint, the transaction stays usable and Do returns the error. The
// claim is one round trip, and a non-empty result one more; the record
// commits with the caller's transaction.
//
// A duplicate running concurrently waits for the first transaction to end,
// for at most InFlightWait; then it gets an *InFlightError (the caller's
// transaction, if any, stays usable and keeps its own lock_timeout). Once
// the first has committed, the duplicate gets the stored result with
// Replayed set and nothing written. Do returns ErrKeyReused, ErrExpired or
// ErrInvalid without running fn. Under REPEATABLE READ or SERIALIZABLE a
// concurrent completion can surface as a serialization failure (SQLSTATE
// 40001): roll back and retry, and the retry replays.
func (p *Postgres) Do(ctx context.Context, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (done Result, err error) {
	ctx, exec := p.tel.start(ctx)
	defer func() { exec.end(ctx, done, err) }()
	if err := key.Validate(); err != nil {
		return Result{}, err
	}
	switch db := p.db.(type) {
	case pgx.Tx:
		return p.doInTx(ctx, db, key, fp, fn)
	case *pgxpool.Pool:
		c, err := db.Acquire(ctx)
		if err != nil {
			return Result{}, fmt.Errorf("idempotency: acquire a connection: %w", err)
		}
		defer c.Release() // which destroys a connection left in a transaction
		return p.doOwn(ctx, c.Conn(), key, fp, fn)
	case *pgx.Conn:
		return p.doOwn(ctx, db, key, fp, fn)
	case TxDB:
		return p.doBegun(ctx, db, key, fp, fn)
	}
	return Result{}, fmt.Errorf("%w: Do needs a DB that can begin a transaction, or a pgx.Tx; got %T", ErrInvalid, p.db)
}

// doBegun is Do on a TxDB that is neither a pool nor a connection: it begins
// a transaction and runs in it as in the caller's.
func (p *Postgres) doBegun(ctx context.Context, db TxDB, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (Result, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("idempotency: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	res, err := p.doInTx(ctx, tx, key, fp, fn)
	if err != nil || res.Replayed {
		return res, err // nothing to commit
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, fmt.Errorf("idempotency: commit %s: %w", key, err)
	}
	return res, nil
}

// doOwn is Do in a transaction of its own on conn.
func (p *Postgres) doOwn(ctx context.Context, conn *pgx.Conn, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (Result, error) {
	tx, rec, found, err := p.begin(ctx, conn, key)
	// Whatever happens below, conn leaves Do outside a transaction: rolled
	// back unless the COMMIT went through. A broken connection makes the
	// rollback fail, and pgx closes it.
	defer func() {
		if tx != nil && conn.PgConn().TxStatus() != 'I' {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err != nil {
		return Result{}, p.claimError(ctx, key, err)
	}
	if failpoint.Mutant("idempotency.claim.conflict") {
		found = false // run fn again, as for a new key
	}
	if found {
		res, err := classify(rec, fp, p.cfg.RetryAfter)
		if err != nil {
			return Result{}, err
		}
		return *res, nil // nothing was written; the rollback ends it
	}
	res, err := fn(context.WithValue(ctx, txKey{}, tx))
	if err != nil {
		return Result{}, err // the rollback undoes fn's writes
	}
	res.Replayed = false
	if st := conn.PgConn().TxStatus(); st != 'T' {
		// fn committed, rolled back or broke the transaction.
		return Result{}, fmt.Errorf("idempotency: record %s: the transaction is no longer open (status %q)", key, st)
	}
	failpoint.Inject(ctx, "idempotency.postgres.before-write")
	return res, p.recordAndCommit(ctx, conn, key, fp, res)
}

// begin sends BEGIN with the key's lock and the read of its record, and
// waits (bounded) for the lock when a duplicate holds it.
func (p *Postgres) begin(ctx context.Context, conn *pgx.Conn, key Key) (pgx.Tx, Record, bool, error) {
	lock := p.lockKey(key)
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	b.Queue(p.sql.tx.tryLock, lock)
	b.Queue(p.sql.lookup, key.Tenant, key.ID)
	br := conn.SendBatch(ctx, &b)
	tx := br.Tx()
	_, err := br.Exec() // BEGIN
	var held bool
	if err == nil {
		err = br.QueryRow().Scan(&held)
	}
	var rec Record
	var found bool
	if err == nil {
		rec, found, err = scanRecord(br.QueryRow(), key)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if !held && failpoint.Mutant("idempotency.claim.in-flight") {
		held = true // run beside the execution in flight
	}
	if err != nil || held {
		return tx, rec, found, err
	}
	// A duplicate is in flight: wait for its transaction to end.
	var restored string
	var wb pgx.Batch
	wb.Queue(p.sql.tx.waitLock, lock, p.inFlightWait())
	wb.Queue(p.sql.lookup, key.Tenant, key.ID)
	wbr := conn.SendBatch(ctx, &wb)
	err = wbr.QueryRow().Scan(&restored)
	if err == nil {
		rec, found, err = scanRecord(wbr.QueryRow(), key)
	}
	if cerr := wbr.Close(); err == nil {
		err = cerr
	}
	return tx, rec, found, err
}

// recordAndCommit inserts the record with res and commits, in one batch: a
// failed insert aborts the transaction, and the server skips the COMMIT
// queued behind it, so the work never commits without its record.
func (p *Postgres) recordAndCommit(ctx context.Context, conn *pgx.Conn, key Key, fp Fingerprint, res Result) error {
	header, err := encodeHeader(res.Header)
	if err != nil {
		return err
	}
	record := p.sql.tx.record
	if failpoint.Mutant("idempotency.claim.conflict") {
		record = p.render(mutantRecord)
	}
	var b pgx.Batch
	b.Queue(record, key.Tenant, key.ID, fp[:], res.Status, header, res.Body, p.retention())
	b.Queue("commit")
	br := conn.SendBatch(ctx, &b)
	_, err = br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		return fmt.Errorf("idempotency: record %s: the key was recorded by another writer meanwhile; nothing committed", key)
	case err != nil:
		return fmt.Errorf("idempotency: record and commit %s: %w", key, err)
	case tag.String() != "COMMIT":
		return fmt.Errorf("idempotency: commit %s: %w", key, pgx.ErrTxCommitRollback)
	}
	return nil
}

// doInTx is Do in the caller's transaction tx.
func (p *Postgres) doInTx(ctx context.Context, tx pgx.Tx, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (Result, error) {
	replay, err := p.claimInTx(ctx, tx, key, fp)
	if err != nil || replay != nil {
		if replay != nil {
			return *replay, nil
		}
		return Result{}, err
	}
	res, err := fn(context.WithValue(ctx, txKey{}, tx))
	if err != nil {
		return Result{}, p.rollbackTo(ctx, tx, err)
	}
	res.Replayed = false
	if c := tx.Conn(); c != nil && c.PgConn().TxStatus() != 'T' {
		// A statement of fn failed (and fn ignored it): the savepoint
		// rolls it back with the claim.
		err := fmt.Errorf("idempotency: complete %s: the transaction is not open (status %q)", key, c.PgConn().TxStatus())
		return Result{}, p.rollbackTo(ctx, tx, err)
	}
	failpoint.Inject(ctx, "idempotency.postgres.before-write")
	if res.empty() {
		// The claim recorded it. The savepoint stays until the caller's
		// transaction ends, as its own writes do: releasing it would cost
		// a round trip.
		return res, nil
	}
	if err := p.completeInTx(ctx, tx, key, res); err != nil {
		return Result{}, p.rollbackTo(ctx, tx, err)
	}
	return res, nil
}

// claimInTx opens the savepoint and claims key in it: nil, nil when it holds
// the key; the stored result or an error otherwise, with the savepoint
// rolled back and released.
func (p *Postgres) claimInTx(ctx context.Context, tx pgx.Tx, key Key, fp Fingerprint) (*Result, error) {
	kind, rec, err := p.claim(ctx, tx, key, fp, sqlSavepoint)
	for attempt := 1; err == nil && (kind == claimBusy || kind == claimRaced); attempt++ {
		if attempt > 3 {
			return nil, p.rollbackTo(ctx, tx, &InFlightError{Key: key, RetryAfter: p.cfg.RetryAfter})
		}
		before := "" // raced: claim again
		if kind == claimBusy {
			before = sqlWaitLock // then the claim holds the lock
		}
		kind, rec, err = p.claim(ctx, tx, key, fp, before)
	}
	switch {
	case err != nil:
		return nil, p.rollbackTo(ctx, tx, p.claimError(ctx, key, err))
	case kind == claimFound:
		res, err := classify(rec, fp, p.cfg.RetryAfter)
		return res, p.rollbackTo(ctx, tx, err)
	}
	return nil, nil
}

// claim runs sqlClaim in tx, preceded in the same batch by before: the
// savepoint, the bounded wait for the lock, or nothing.
func (p *Postgres) claim(ctx context.Context, tx pgx.Tx, key Key, fp Fingerprint, before string) (int, Record, error) {
	lock := p.lockKey(key)
	claim := p.sql.tx.claim
	if failpoint.Mutant("idempotency.claim.conflict") {
		claim = p.render(strings.Replace(sqlClaim, "DO NOTHING", mutantClaimConflict, 1))
	}
	var b pgx.Batch
	switch before {
	case sqlSavepoint:
		b.Queue(sqlSavepoint)
	case sqlWaitLock:
		b.Queue(p.sql.tx.waitLock, lock, p.inFlightWait())
	}
	b.Queue(claim, key.Tenant, key.ID, fp[:], lock, p.retention())
	br := tx.SendBatch(ctx, &b)
	var err error
	if before != "" {
		_, err = br.Exec()
	}
	kind := claimRaced
	var rec Record
	if err == nil {
		var found bool
		rec, found, err = scanRecord(br.QueryRow(), key, &kind)
		if !found {
			kind = claimRaced
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return kind, rec, err
}

// completeInTx stores res on the claimed record and releases the savepoint,
// in one batch.
func (p *Postgres) completeInTx(ctx context.Context, tx pgx.Tx, key Key, res Result) error {
	header, err := encodeHeader(res.Header)
	if err != nil {
		return err
	}
	var b pgx.Batch
	b.Queue(p.sql.tx.complete, key.Tenant, key.ID, res.Status, header, res.Body)
	b.Queue(sqlRelease)
	br := tx.SendBatch(ctx, &b)
	var one int
	err = br.QueryRow().Scan(&one)
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "22P02":
		return fmt.Errorf("idempotency: complete %s: the claim is gone (removed through the transaction?)", key)
	case err != nil:
		return fmt.Errorf("idempotency: complete %s: %w", key, err)
	}
	return nil
}

// rollbackTo rolls the caller's transaction back to the savepoint and
// releases it, so that it stays usable without anything Do or fn wrote, and
// returns cause (joined with the rollback's failure, if any). A nil cause
// returns nil after the rollback.
func (p *Postgres) rollbackTo(ctx context.Context, tx pgx.Tx, cause error) error {
	if _, err := tx.Exec(context.WithoutCancel(ctx), sqlRollback+"; "+sqlRelease); err != nil {
		return errors.Join(cause, fmt.Errorf("idempotency: roll back to the savepoint: %w", err))
	}
	return cause
}

func (p *Postgres) inFlightWait() string {
	return fmt.Sprintf("%dms", max(1, p.cfg.InFlightWait.Milliseconds()))
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

// render renders a statement for this store's tables: for the unsafe
// variants of mutant sites, which are not rendered in advance.
func (p *Postgres) render(sql string) string { return migrate.Render(sql, p.tables) }
