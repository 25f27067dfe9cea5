//go:build lockfree_mutants

package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/partition"
)

// The foil of TestLateHeartbeatAnswerIsReported: a store that renews an
// expired membership lease (the partition.heartbeat.expired mutant) is
// still caught through the reports, the late ones included.
func TestRevivedMembershipIsCaught(t *testing.T) {
	defer failpoint.EnableMutant("partition.heartbeat.expired")()
	db := testdb.New(t, partition.Migrations()...)
	store, err := partition.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	env, reports := engine.RecordingEnv(engine.Params{})
	m := approach.Membership{Membership: store, Env: env}
	const ttl = 300 * time.Millisecond
	ctx := context.Background()
	info, err := m.Join(ctx, partition.MemberInfo{Name: "worker-0"}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	untilTime(time.Now().Add(ttl + ttl/10 + 50*time.Millisecond))
	if err := m.Heartbeat(ctx, info.Name, info.Incarnation, ttl); err != nil {
		t.Fatalf("the mutant refused the heartbeat of an expired lease: %v", err)
	}
	if vs := reports.MemberViolations(); len(vs) != 1 {
		t.Fatalf("violations %+v; want the revived lease", vs)
	}
}
