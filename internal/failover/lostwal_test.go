package failover_test

import (
	"testing"

	"github.com/lockfree-go/lockfree/internal/replpair"
)

// Test 1 of docs/failover.md: asynchronous replication, the standby held
// from receiving WAL while the primary mints and commits, the primary
// killed, the standby promoted. Every fence minted afterwards is greater
// than every fence minted before, in every kind; the plain forms go back.
func TestLostWALAsync(t *testing.T) {
	p := replpair.Get(t)
	setup(t, p)
	old := p.Primary()
	conn := p.Connect(p.URL(old))
	before := mintAll(t, conn, 5)
	p.WaitReplayed()

	p.HoldStandby()
	// More mints than a sequence logs ahead (32), so that the plain
	// sequences hand out values the standby has no record of.
	lost := mintAll(t, conn, 50)
	for f, vs := range lost {
		before[f] = append(before[f], vs...)
	}
	p.Kill(old)
	p.Promote()

	conn = p.Connect(p.MultiURL())
	if got, want := serverPort(t, conn), nodePort(t, p, p.Primary()); got != want {
		t.Fatalf("the multi-host URL reached port %d, not the new primary's %d", got, want)
	}
	checkAfter(t, before, mintAll(t, conn, 50))
}
