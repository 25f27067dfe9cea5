package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/internal/replpair"
	"github.com/lockfree-go/lockfree/migrate"
)

// probeSQL mints through fence_mint and reads both places the timeline
// shows: the WAL file being written (what fence_era uses) and the last
// checkpoint (pg_control_checkpoint()).
var probeSQL = migrate.Render(`SELECT {{fence_mint}}('probe_tokens'),
	('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint,
	(SELECT timeline_id FROM pg_control_checkpoint())::bigint`, migrate.Names{})

type probe struct{ token, walTL, checkpointTL int64 }

func (pr *probe) scan(ctx context.Context, conn *pgx.Conn) error {
	return conn.QueryRow(ctx, probeSQL).Scan(&pr.token, &pr.walTL, &pr.checkpointTL)
}

// The era a fence is minted in is the promoted server's new timeline from
// the first statement that can write, on a session opened on the standby
// before the promotion as on a new one, before the post-promotion
// checkpoint has ended and after a CHECKPOINT: pg_control_checkpoint() may
// still show the old timeline meanwhile, the WAL file name never does.
func TestEraAtPromotion(t *testing.T) {
	p := replpair.Get(t)
	setup(t, p)
	old := p.Primary()
	// Dirty buffers make the post-promotion checkpoint, which is spread,
	// take a while.
	p.Exec(old, `CREATE TABLE ballast AS SELECT g AS id, repeat('x', 200) AS pad FROM generate_series(1, 200000) g`)
	p.WaitReplayed()
	oldTL := p.Timeline(old)
	early := p.Connect(p.URL(p.Standby())) // outlives the promotion

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var pgErr *pgconn.PgError
	if err := new(probe).scan(ctx, early); !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("minting on the standby: %v, want SQLSTATE 25006 (read-only), as nextval", err)
	}
	p.Kill(old)
	first := make(chan probe, 1)
	go func() {
		// Mint as soon as the session can write: every attempt before that
		// fails (read-only, recovery in progress).
		var pr probe
		for ctx.Err() == nil {
			if err := pr.scan(ctx, early); err == nil {
				first <- pr
				return
			}
		}
		close(first)
	}()
	p.Promote()
	pr, ok := <-first
	if !ok {
		t.Fatal("the session opened on the standby never minted after the promotion")
	}
	var fresh, after probe
	if err := fresh.scan(ctx, p.Connect(p.MultiURL())); err != nil {
		t.Fatal(err)
	}
	if _, err := early.Exec(ctx, `CHECKPOINT`); err != nil {
		t.Fatal(err)
	}
	if err := after.scan(ctx, early); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		when string
		pr   probe
	}{{"first mint on the early session", pr}, {"first mint on a new session", fresh}, {"after CHECKPOINT", after}} {
		if c.pr.walTL <= oldTL || era(c.pr.token) != c.pr.walTL {
			t.Errorf("%s: era %d, WAL timeline %d; the old primary's was %d", c.when, era(c.pr.token), c.pr.walTL, oldTL)
		}
		t.Logf("%s: era %d, WAL timeline %d, pg_control_checkpoint() timeline %d (old primary: %d)",
			c.when, era(c.pr.token), c.pr.walTL, c.pr.checkpointTL, oldTL)
	}
	if after.checkpointTL != after.walTL {
		t.Errorf("after CHECKPOINT pg_control_checkpoint() shows timeline %d, the WAL %d", after.checkpointTL, after.walTL)
	}
}
