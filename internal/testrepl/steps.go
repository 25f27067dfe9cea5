package testrepl

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// step runs one step on the pair for the test, failing it when the step
// fails.
func (p *Pair) step(do func(ctx context.Context) error) {
	p.t.Helper()
	if err := do(context.Background()); err != nil {
		p.t.Fatalf("testrepl: %v", err)
	}
}

// HoldStandby stops the standby's WAL receiver: from now on the primary's
// commits do not reach it (and, with SetSync(true), they wait for it).
func (p *Pair) HoldStandby() {
	p.t.Helper()
	p.step(p.c.pair.HoldStandby)
}

// ReleaseStandby starts the standby's WAL receiver again and returns once
// it streams.
func (p *Pair) ReleaseStandby() {
	p.t.Helper()
	p.step(p.c.pair.ReleaseStandby)
}

// Kill crashes node n: SIGKILL to its postmaster, no shutdown checkpoint,
// its open sessions gone. Whatever it had not sent to the standby is lost.
func (p *Pair) Kill(n Node) {
	p.t.Helper()
	p.step(func(ctx context.Context) error { return p.c.pair.Kill(ctx, n) })
}

// Stop shuts node n down cleanly (fast mode).
func (p *Pair) Stop(n Node) {
	p.t.Helper()
	p.step(func(ctx context.Context) error { return p.c.pair.Stop(ctx, n) })
}

// Start starts node n again, in the role its data gives it.
func (p *Pair) Start(n Node) {
	p.t.Helper()
	p.step(func(ctx context.Context) error { return p.c.pair.StartNode(ctx, n) })
}

// Isolate cuts node n off as a network partition would: new connections
// and replication are refused, sessions already open keep working (clients
// on its side of the partition).
func (p *Pair) Isolate(n Node) {
	p.t.Helper()
	p.step(func(ctx context.Context) error { return p.c.pair.Isolate(ctx, n) })
}

// Heal undoes Isolate.
func (p *Pair) Heal(n Node) {
	p.t.Helper()
	p.step(func(ctx context.Context) error { return p.c.pair.Heal(ctx, n) })
}

// Promote promotes the standby and returns once it accepts writes; it
// becomes Primary. The old primary is left as it is: kill or isolate it
// first, or have a split brain.
func (p *Pair) Promote() {
	p.t.Helper()
	p.step(p.c.pair.Promote)
}

// SetSync makes replication synchronous (the primary's commits wait until
// the standby has flushed them) or asynchronous again.
func (p *Pair) SetSync(on bool) {
	p.t.Helper()
	p.step(func(ctx context.Context) error { return p.c.pair.SetSync(ctx, on) })
}

// WaitReplayed returns once the standby has replayed all the WAL the
// primary had written when it was called.
func (p *Pair) WaitReplayed() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var target string
	p.queryRow(p.Primary(), `SELECT pg_current_wal_lsn()::text`, &target)
	conn, err := pgx.Connect(ctx, p.URL(p.Standby()))
	if err != nil {
		p.t.Fatalf("testrepl: connect to the standby: %v", err)
	}
	defer conn.Close(ctx)
	for {
		var done bool
		err := conn.QueryRow(ctx, `SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)`, target).Scan(&done)
		if err != nil {
			p.t.Fatalf("testrepl: the standby did not replay up to %s: %v", target, err)
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			p.t.Fatalf("testrepl: the standby did not replay up to %s within a minute", target)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
