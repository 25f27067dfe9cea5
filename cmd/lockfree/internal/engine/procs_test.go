package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// TestProcs runs inventory's 16 clients in 4 processes under pause, which
// stops a process and its 4 clients: the coalescing alternative (each
// process's clients share one Coalescer) and the fenced lock show no
// violation, checked; the naive lock shows some; every client's
// operations are counted, and some sales shared a statement.
func TestProcs(t *testing.T) {
	t.Parallel()
	sc, _ := engine.Lookup("inventory")
	infra := engine.Infra{URL: testdb.New(t).URL}
	cfg := engine.Config{Clients: 16, Procs: 4, Keys: 1, Duration: 3 * time.Second, Faults: []engine.Fault{engine.Pause},
		Approaches: []engine.Approach{engine.Coalesced, engine.FencedLock, engine.NaiveLock}}
	rep := runLogged(t, sc, cfg, infra)
	if rep.Procs != 4 || rep.Clients != 16 {
		t.Errorf("report: %d clients in %d processes, want 16 in 4", rep.Clients, rep.Procs)
	}
	for _, r := range rep.Results {
		logResult(t, r)
		checkResult(t, engine.Pause, "", r, false)
		if r.Approach == engine.Coalesced && r.Extra["merged"] == 0 {
			t.Errorf("%s: no sale shared a statement (%v steps)", r.Approach, r.Extra["steps"])
		}
	}
}

// TestProcsRefused: a number of processes that does not divide the
// clients, a scenario whose clients are one per process, and a fault that
// acts on one client's identity are refused before anything runs.
func TestProcsRefused(t *testing.T) {
	t.Parallel()
	inventory, _ := engine.Lookup("inventory")
	accounts, _ := engine.Lookup("accounts")
	infra := engine.Infra{URL: "postgres://nowhere.invalid/x"}
	for _, tc := range []struct {
		name string
		sc   engine.Scenario
		cfg  engine.Config
	}{
		{"not dividing", inventory, engine.Config{Clients: 16, Procs: 3}},
		{"more processes than clients", inventory, engine.Config{Clients: 4, Procs: 8}},
		{"one client per process", accounts, engine.Config{Clients: 16, Procs: 4}},
		{"fault on a client", inventory, engine.Config{Clients: 16, Procs: 4, Faults: []engine.Fault{engine.Crash}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := engine.Run(context.Background(), tc.sc, tc.cfg, infra)
			if !errors.Is(err, engine.ErrInvalid) {
				t.Errorf("Run: %v, want ErrInvalid", err)
			}
		})
	}
}
