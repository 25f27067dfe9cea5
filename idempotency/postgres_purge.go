package idempotency

import (
	"context"
	"fmt"
)

// Purge in two steps: expired records become tombstones (their results
// dropped, their keys still spent), and tombstones past TombstoneRetention
// are deleted. Both skip rows that a claim has locked rather than wait.
const (
	sqlTombstone = `UPDATE {{idempotency_keys}} SET state = 'tombstone', status = NULL, header = NULL, body = NULL,
			recovery_point = '', lease_expires_at = NULL
		WHERE (tenant, key) IN (SELECT tenant, key FROM {{idempotency_keys}}
			WHERE state <> 'tombstone' AND expires_at <= clock_timestamp()
			  AND (state <> 'running' OR lease_expires_at <= clock_timestamp())
			ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`
	sqlDeleteTombstones = `DELETE FROM {{idempotency_keys}}
		WHERE (tenant, key) IN (SELECT tenant, key FROM {{idempotency_keys}}
			WHERE state = 'tombstone' AND expires_at <= clock_timestamp() - $2 * interval '1 microsecond'
			ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`
)

type purgeStatements struct {
	tombstone, delete string
}

func renderPurge(r func(string) string) purgeStatements {
	return purgeStatements{tombstone: r(sqlTombstone), delete: r(sqlDeleteTombstones)}
}

// Purge turns up to limit expired records into tombstones (dropping their
// results; the key stays spent, so a late retry gets ErrExpired) and then
// deletes tombstones older than TombstoneRetention, up to limit records in
// all, and returns how many it changed. Call it in a loop until it returns
// less than limit; records locked by a running claim are skipped, not
// waited for.
func (p *Postgres) Purge(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: purge limit %d must be positive", ErrInvalid, limit)
	}
	if err := p.usable(); err != nil {
		return 0, err
	}
	tag, err := p.db.Exec(ctx, p.sql.purge.tombstone, limit)
	if err != nil {
		return 0, fmt.Errorf("idempotency: purge: %w", err)
	}
	n := tag.RowsAffected()
	if n == int64(limit) {
		return n, nil
	}
	tag, err = p.db.Exec(ctx, p.sql.purge.delete, int64(limit)-n, p.cfg.TombstoneRetention.Microseconds())
	if err != nil {
		return n, fmt.Errorf("idempotency: purge: %w", err)
	}
	return n + tag.RowsAffected(), nil
}
