package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// The fenced twin's records on PostgreSQL: the record is the resource, and
// its token column the fence. sqlReadFenced is the fenced read: it raises
// the token (inserting a placeholder without a result for a new key) and
// returns the row in the same statement; a holder with a lower token gets
// no row. sqlPutFenced writes the result under the same condition.
const (
	sqlReadFenced = `INSERT INTO {{idempotency_keys}} AS k (tenant, key, fingerprint, state, token, lease_expires_at, created_at, expires_at)
		VALUES ($1, $2, $3, 'running', $4, '-infinity', clock_timestamp(), clock_timestamp() + $5 * interval '1 microsecond')
		ON CONFLICT (tenant, key) DO UPDATE SET ` + readStamp + `,
			fingerprint = CASE WHEN k.state = 'running' THEN EXCLUDED.fingerprint ELSE k.fingerprint END
		WHERE ` + fencedTokenAdmitted + `
		RETURNING ` + lookupColumns
	readStamp           = `token = EXCLUDED.token`
	fencedTokenAdmitted = `k.token <= EXCLUDED.token`
	sqlPutFenced        = `INSERT INTO {{idempotency_keys}} AS k (tenant, key, fingerprint, state, token, status, header, body, created_at, expires_at)
		VALUES ($1, $2, $3, 'done', $4, $5, $6, $7, clock_timestamp(), clock_timestamp() + $8 * interval '1 microsecond')
		ON CONFLICT (tenant, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, state = 'done', token = EXCLUDED.token,
			status = EXCLUDED.status, header = EXCLUDED.header, body = EXCLUDED.body, lease_expires_at = NULL,
			recovery_point = '', expires_at = EXCLUDED.expires_at
		WHERE ` + fencedTokenAdmitted
	sqlDropFenced = `DELETE FROM {{idempotency_keys}} WHERE tenant = $1 AND key = $2 AND token = $3 AND state = 'running'`
)

// Unsafe variants for mutant sites, keeping the parameters they replace.
const (
	mutantReadStamp     = `token = k.token`
	mutantTokenAdmitted = `EXCLUDED.token IS NOT NULL`
)

type fencedStatements struct {
	read, put, drop string
}

func renderFenced(r func(string) string) fencedStatements {
	return fencedStatements{read: r(sqlReadFenced), put: r(sqlPutFenced), drop: r(sqlDropFenced)}
}

// ReadFenced implements FencedStore in one statement.
func (p *Postgres) ReadFenced(ctx context.Context, key Key, fp Fingerprint, token int64) (Record, error) {
	if err := validToken(key, token); err != nil {
		return Record{}, err
	}
	if err := p.usable(); err != nil {
		return Record{}, err
	}
	read := p.sql.fenced.read
	if failpoint.Mutant("idempotency.fenced.read.stamp") {
		read = p.render(strings.Replace(sqlReadFenced, readStamp, mutantReadStamp, 1))
	}
	rec, found, err := scanRecord(p.db.QueryRow(ctx, read, key.Tenant, key.ID, fp[:], token, p.retention()), key)
	if err != nil {
		return Record{}, fmt.Errorf("idempotency: fenced read of %s: %w", key, err)
	}
	if !found {
		if err := p.fenced(ctx, key, token); err != nil {
			return Record{}, err
		}
		return Record{}, fmt.Errorf("idempotency: fenced read of %s: the record vanished", key)
	}
	return rec, nil
}

// PutFenced implements FencedStore.
func (p *Postgres) PutFenced(ctx context.Context, key Key, fp Fingerprint, token int64, r Result) error {
	if err := validToken(key, token); err != nil {
		return err
	}
	header, err := encodeHeader(r.Header)
	if err != nil {
		return err
	}
	if err := p.usable(); err != nil {
		return err
	}
	put := p.sql.fenced.put
	if failpoint.Mutant("idempotency.fenced.put.token") {
		put = p.render(strings.Replace(sqlPutFenced, "WHERE "+fencedTokenAdmitted, "WHERE "+mutantTokenAdmitted, 1))
	}
	tag, err := p.db.Exec(ctx, put, key.Tenant, key.ID, fp[:], token, r.Status, header, r.Body, p.retention())
	if err != nil {
		return fmt.Errorf("idempotency: fenced put %s: %w", key, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	return p.fenced(ctx, key, token)
}

// DropFenced implements FencedStore.
func (p *Postgres) DropFenced(ctx context.Context, key Key, token int64) error {
	if err := validToken(key, token); err != nil {
		return err
	}
	if err := p.usable(); err != nil {
		return err
	}
	tag, err := p.db.Exec(ctx, p.sql.fenced.drop, key.Tenant, key.ID, token)
	if err != nil {
		return fmt.Errorf("idempotency: fenced drop %s: %w", key, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	return p.fenced(ctx, key, token)
}

// fenced reports why a fenced statement with token changed nothing: a
// *fencedlock.FencedError when the record has a higher token, nil when it
// has none or the same (a result that token stored stays).
func (p *Postgres) fenced(ctx context.Context, key Key, token int64) error {
	var cur int64
	err := p.db.QueryRow(ctx, p.sql.leased.token, key.Tenant, key.ID).Scan(&cur)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("idempotency: token of %s: %w", key, err)
	case cur > token:
		return &fencedlock.FencedError{Presented: token, Required: cur}
	}
	return nil
}
