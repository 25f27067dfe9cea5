package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/localetcd"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// Under pause, etcd's lock loses data like any lease lock (inventory's
// sales, singleton's closings): a holder paused past its session's lease
// writes after another took over; the same lock with the mutex key's
// revision presented to the fence loses none. The etcd server is the lab's
// embedded one, as lockfree compare starts it.
func TestEtcdLocksUnderPause(t *testing.T) {
	t.Parallel()
	srv, err := localetcd.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	for _, name := range []string{"inventory", "singleton"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc, _ := engine.Lookup(name)
			rep := runLogged(t, sc, engine.Config{Clients: 8, Keys: 1, Duration: 4 * time.Second,
				Faults: []engine.Fault{engine.Pause}, Approaches: []engine.Approach{engine.EtcdLock, engine.EtcdFenced}},
				engine.Infra{URL: testdb.New(t).URL, Etcd: srv.Endpoint})
			if len(rep.Results) != 2 {
				t.Fatalf("%d results, want etcd-lock's and etcd-fenced's", len(rep.Results))
			}
			for _, r := range rep.Results {
				checkEtcdUnderPause(t, r)
			}
		})
	}
}

func checkEtcdUnderPause(t *testing.T, r report.Result) {
	t.Helper()
	logResult(t, r)
	switch {
	case r.Skipped != "":
		t.Errorf("%s skipped: %s", r.Approach, r.Skipped)
	case r.FaultsInjected[engine.Pause] == 0:
		t.Errorf("%s: pause not injected", r.Approach)
	case !r.Checked:
		t.Errorf("%s: not checked: %s", r.Approach, r.Detail)
	case r.Approach == engine.EtcdFenced && r.Violations != 0:
		t.Errorf("%s: %d violations: %s", r.Approach, r.Violations, r.Detail)
	case r.Approach == engine.EtcdLock && r.Violations == 0:
		t.Errorf("%s: no violation under %d pauses: the fault did not bite, or the check missed it", r.Approach, r.FaultsInjected[engine.Pause])
	}
}
