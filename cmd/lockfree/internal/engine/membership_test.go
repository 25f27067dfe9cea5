package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/partition"
)

// lateAnswer is a membership store whose next heartbeat, once armed, is made
// on the real store while its answer is held: until the caller stops
// waiting — as a starved member reads its answer after its renewal loop's
// deadline cancelled the request, and pgx reports the context's error — or
// until the test lets it go.
type lateAnswer struct {
	partition.Membership
	armed   atomic.Bool
	made    chan struct{} // closed once the held heartbeat was made
	release chan struct{} // closed by the test: the answer goes out
}

func (l *lateAnswer) Heartbeat(ctx context.Context, name string, incarnation int64, ttl time.Duration) error {
	if !l.armed.CompareAndSwap(true, false) {
		return l.Membership.Heartbeat(ctx, name, incarnation, ttl)
	}
	err := l.Membership.Heartbeat(context.WithoutCancel(ctx), name, incarnation, ttl)
	close(l.made)
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-l.release:
		return err
	}
}

// A heartbeat the store made, whose answer came after the member had
// stopped waiting for it, extended the membership lease all the same. The
// harness reports it, as it reports a lock's late renewal: otherwise the
// member's next heartbeat, sent past the expiry the exclusivity check
// computes from the last heartbeat it saw, reads as the revival of an
// expired lease, a violation the store never made (seen under load in
// accounts / verified-alternative).
func TestLateHeartbeatAnswerIsReported(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, partition.Migrations()...)
	store, err := partition.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	late := &lateAnswer{Membership: store, made: make(chan struct{}), release: make(chan struct{})}
	env, reports := engine.RecordingEnv(engine.Params{})
	m := approach.Membership{Membership: late, Env: env}
	const ttl = 2 * time.Second
	ctx := context.Background()
	info, err := m.Join(ctx, partition.MemberInfo{Name: "worker-0"}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	joined := time.Now() // after the join's report: the check's expiry is later

	// Half a TTL on, a heartbeat extends the lease to 1.5 TTL after the
	// join; its caller stops waiting before the answer comes.
	untilTime(joined.Add(ttl / 2))
	late.armed.Store(true)
	hctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- m.Heartbeat(hctx, info.Name, info.Incarnation, ttl) }()
	<-late.made
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the heartbeat's caller got an answer it had stopped waiting for")
	}
	close(late.release)
	waitFor(time.Second, func() bool { return reports.Count(engine.Joined) == 2 })

	// Past the join's TTL and the check's margin, within the late
	// heartbeat's extension: the store renews the lease.
	untilTime(joined.Add(ttl + ttl/10 + 50*time.Millisecond))
	if err := m.Heartbeat(ctx, info.Name, info.Incarnation, ttl); err != nil {
		t.Fatalf("heartbeat past the join's TTL: %v; want the lease the late heartbeat extended", err)
	}
	if vs := reports.MemberViolations(); len(vs) != 0 {
		t.Fatalf("%d violations, first: %s; want none: the store renewed a lease in force", len(vs), vs[0].Text)
	}
}

// untilTime waits until t.
func untilTime(t time.Time) { time.Sleep(time.Until(t)) }

// waitFor polls cond until it holds or bound has passed.
func waitFor(bound time.Duration, cond func() bool) {
	for end := time.Now().Add(bound); !cond() && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
}
