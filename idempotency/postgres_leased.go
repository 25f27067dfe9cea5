package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// Leased mode on PostgreSQL: a record 'running' with a lease and a token.
//
// sqlEnsure gives a new key a running record with no token and an expired
// lease, so that every token is minted by sqlTakeover, after it holds the
// row lock (as fencedlock mints its tokens). Claim sends both with the read
// of the record in one batch. Renew, Checkpoint, Complete and Release are
// compare-and-set statements on the attempt's token.
const (
	sqlEnsure = `INSERT INTO {{idempotency_keys}} (tenant, key, fingerprint, state, token, lease_expires_at, created_at, expires_at)
		VALUES ($1, $2, $3, 'running', 0, '-infinity', clock_timestamp(), clock_timestamp() + $4 * interval '1 microsecond')
		ON CONFLICT (tenant, key) DO NOTHING`
	sqlTakeover = `UPDATE {{idempotency_keys}}
		SET token = nextval({{regclass idempotency_tokens}}), lease_expires_at = clock_timestamp() + $4 * interval '1 microsecond'
		WHERE tenant = $1 AND key = $2 AND state = 'running' ` + takeoverSameRequest + ` ` + takeoverNotInFlight + ` ` + takeoverNotExpired + `
		RETURNING token, lease_expires_at, recovery_point`
	takeoverSameRequest = `AND fingerprint = $3`
	takeoverNotInFlight = `AND lease_expires_at <= clock_timestamp()`
	takeoverNotExpired  = `AND expires_at > clock_timestamp()`
	sqlRenew            = `UPDATE {{idempotency_keys}} SET lease_expires_at = clock_timestamp() + $4 * interval '1 microsecond'
		WHERE tenant = $1 AND key = $2 AND token = $3 AND state = 'running' AND lease_expires_at > clock_timestamp()
		RETURNING lease_expires_at`
	sqlCheckpoint = `UPDATE {{idempotency_keys}} SET recovery_point = $4
		WHERE tenant = $1 AND key = $2 AND token = $3 AND state = 'running'`
	sqlCompleteLeased = `UPDATE {{idempotency_keys}} SET state = 'done', status = $4, header = $5, body = $6,
			lease_expires_at = NULL, expires_at = clock_timestamp() + $7 * interval '1 microsecond'
		WHERE tenant = $1 AND key = $2 AND ` + leaseTokenMatches + ` AND state = 'running'`
	// sqlReleaseLeased deletes a record without a recovery point (a retry
	// starts afresh) and ends the lease of one with a recovery point (a
	// retry resumes after it); it answers how many records it changed.
	sqlReleaseLeased = `WITH deleted AS (
			DELETE FROM {{idempotency_keys}}
			WHERE tenant = $1 AND key = $2 AND ` + leaseTokenMatches + ` AND state = 'running' AND recovery_point = ''
			RETURNING 1),
		ended AS (
			UPDATE {{idempotency_keys}} SET lease_expires_at = clock_timestamp()
			WHERE tenant = $1 AND key = $2 AND ` + leaseTokenMatches + ` AND state = 'running' AND recovery_point <> ''
			RETURNING 1)
		SELECT (SELECT count(*) FROM deleted) + (SELECT count(*) FROM ended)`
	leaseTokenMatches = `token = $3`
	sqlToken          = `SELECT token FROM {{idempotency_keys}} WHERE tenant = $1 AND key = $2`
)

// Unsafe variants of the conditions above, for mutant sites; they keep the
// parameters of the conditions they replace.
const (
	mutantSameRequest = `AND $3::bytea IS NOT NULL`
	mutantNotInFlight = `AND lease_expires_at IS NOT NULL`
	mutantNotExpired  = `AND expires_at IS NOT NULL`
	mutantTokenAny    = `$3::bigint IS NOT NULL`
)

type leasedStatements struct {
	ensure, takeover, renew, checkpoint, complete, release, token string
}

func renderLeased(r func(string) string) leasedStatements {
	return leasedStatements{ensure: r(sqlEnsure), takeover: r(sqlTakeover), renew: r(sqlRenew),
		checkpoint: r(sqlCheckpoint), complete: r(sqlCompleteLeased), release: r(sqlReleaseLeased), token: r(sqlToken)}
}

// takeover returns the takeover statement, or its unsafe variant when a
// mutant site of one of its conditions is on.
func (p *Postgres) takeover() string {
	sql := sqlTakeover
	if failpoint.Mutant("idempotency.fingerprint") {
		sql = strings.Replace(sql, takeoverSameRequest, mutantSameRequest, 1)
	}
	if failpoint.Mutant("idempotency.claim.in-flight") {
		sql = strings.Replace(sql, takeoverNotInFlight, mutantNotInFlight, 1)
	}
	if failpoint.Mutant("idempotency.expired") {
		sql = strings.Replace(sql, takeoverNotExpired, mutantNotExpired, 1)
	}
	if sql == sqlTakeover {
		return p.sql.leased.takeover
	}
	return p.render(sql)
}

// Claim implements LeaseStore. It runs its statements in one round trip.
func (p *Postgres) Claim(ctx context.Context, key Key, fp Fingerprint, ttl time.Duration) (Lease, *Result, error) {
	if err := validClaim(key, ttl); err != nil {
		return Lease{}, nil, err
	}
	if err := p.usable(); err != nil {
		return Lease{}, nil, err
	}
	for attempt := 0; ; attempt++ {
		l, took, rec, found, err := p.claimLease(ctx, key, fp, ttl)
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

// claimLease sends the ensure, the takeover and the read of the record in
// one batch.
func (p *Postgres) claimLease(ctx context.Context, key Key, fp Fingerprint, ttl time.Duration) (l Lease, took bool, rec Record, found bool, err error) {
	l = Lease{Key: key, TTL: ttl, sent: time.Now()}
	var b pgx.Batch
	b.Queue(p.sql.leased.ensure, key.Tenant, key.ID, fp[:], p.retention())
	b.Queue(p.takeover(), key.Tenant, key.ID, fp[:], ttl.Microseconds())
	b.Queue(p.sql.lookup, key.Tenant, key.ID)
	br := p.db.SendBatch(ctx, &b)
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&l.Token, &l.Expires, &l.RecoveryPoint)
		took = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if err == nil {
		rec, found, err = scanRecord(br.QueryRow(), key)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return l, took, rec, found, err
}

// superseded reports why a compare-and-set on l's token missed.
func (p *Postgres) superseded(ctx context.Context, l Lease) error {
	var cur int64
	err := p.db.QueryRow(ctx, p.sql.leased.token, l.Key.Tenant, l.Key.ID).Scan(&cur)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("idempotency: token of %s: %w", l.Key, err)
	}
	return &SupersededError{Key: l.Key, Presented: l.Token, Required: cur}
}

// Renew implements LeaseStore.
func (p *Postgres) Renew(ctx context.Context, l Lease) (Lease, error) {
	if err := validLease(l); err != nil {
		return Lease{}, err
	}
	if err := p.usable(); err != nil {
		return Lease{}, err
	}
	sent := time.Now()
	err := p.db.QueryRow(ctx, p.sql.leased.renew, l.Key.Tenant, l.Key.ID, l.Token, l.TTL.Microseconds()).Scan(&l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		serr := p.superseded(ctx, l)
		if s, ok := errors.AsType[*SupersededError](serr); ok && s.Required == l.Token {
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
	if err := p.usable(); err != nil {
		return err
	}
	tag, err := p.db.Exec(ctx, p.sql.leased.checkpoint, l.Key.Tenant, l.Key.ID, l.Token, step)
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
	if err := p.usable(); err != nil {
		return err
	}
	complete := p.sql.leased.complete
	if failpoint.Mutant("idempotency.leased.complete.token") {
		complete = p.render(strings.Replace(sqlCompleteLeased, leaseTokenMatches, mutantTokenAny, 1))
	}
	tag, err := p.db.Exec(ctx, complete, l.Key.Tenant, l.Key.ID, l.Token, r.Status, header, r.Body, p.retention())
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
	if err := p.usable(); err != nil {
		return err
	}
	release := p.sql.leased.release
	if failpoint.Mutant("idempotency.leased.release.token") {
		release = p.render(strings.ReplaceAll(sqlReleaseLeased, leaseTokenMatches, mutantTokenAny))
	}
	var n int64
	if err := p.db.QueryRow(ctx, release, l.Key.Tenant, l.Key.ID, l.Token).Scan(&n); err != nil {
		return fmt.Errorf("idempotency: release %s: %w", l.Key, err)
	}
	if n == 0 {
		return p.superseded(ctx, l)
	}
	return nil
}
