package singlewriter_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/singlewriter"
)

var ctx = context.Background()

// mustActor starts an actor with a configuration that must be valid.
func mustActor[S any](t testing.TB, initial S, cfg *singlewriter.ActorConfig) *singlewriter.Actor[S] {
	t.Helper()
	a, err := singlewriter.NewActor(initial, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestActorAppliesInOrderWithoutRaces(t *testing.T) {
	t.Parallel()
	type state struct {
		total int
		seen  map[int][]int // submitter → its values, in applied order
	}
	a := mustActor(t, state{seen: map[int][]int{}}, &singlewriter.ActorConfig{Mailbox: 4})
	const submitters, each = 8, 200
	var wg sync.WaitGroup
	for s := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := a.Do(ctx, func(st *state) error {
					st.total++
					st.seen[s] = append(st.seen[s], i)
					return nil
				}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got, err := singlewriter.Ask(ctx, a, func(st *state) (state, error) { return *st, nil })
	if err != nil {
		t.Fatal(err)
	}
	if got.total != submitters*each {
		t.Fatalf("total = %d, want %d", got.total, submitters*each)
	}
	for s, vs := range got.seen {
		for i, v := range vs {
			if v != i {
				t.Fatalf("submitter %d: command %d applied at position %d", s, v, i)
			}
		}
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestActorResults(t *testing.T) {
	t.Parallel()
	a := mustActor(t, 0, nil)
	defer a.Stop(ctx)
	boom := errors.New("boom")
	tests := []struct {
		name string
		fn   func(*int) error
		want error
	}{
		{"ok", func(n *int) error { *n++; return nil }, nil},
		{"error", func(*int) error { return boom }, boom},
		{"panic", func(*int) error { panic("bad command") }, singlewriter.ErrPanic},
		{"nil", nil, singlewriter.ErrInvalid},
	}
	for _, tt := range tests {
		if err := a.Do(ctx, tt.fn); !errors.Is(err, tt.want) {
			t.Errorf("%s: Do = %v, want %v", tt.name, err, tt.want)
		}
	}
	// The actor survived the panic.
	n, err := singlewriter.Ask(ctx, a, func(n *int) (int, error) { return *n, nil })
	if err != nil || n != 1 {
		t.Fatalf("after panic: %d, %v", n, err)
	}
	var pe *singlewriter.PanicError
	if err := a.Do(ctx, func(*int) error { panic(42) }); !errors.As(err, &pe) || pe.Value != 42 {
		t.Fatalf("PanicError = %v", err)
	}
	// The stack is the panicking command's: it names this test's function.
	if !strings.Contains(string(pe.Stack), "TestActorResults") {
		t.Fatalf("PanicError.Stack does not show the command:\n%s", pe.Stack)
	}
}

// A negative mailbox is refused before any goroutine starts, by NewActor and
// NewGroup alike.
func TestActorConfigValidation(t *testing.T) {
	t.Parallel()
	bad := &singlewriter.ActorConfig{Mailbox: -1}
	if a, err := singlewriter.NewActor(0, bad); !errors.Is(err, singlewriter.ErrInvalid) || a != nil {
		t.Errorf("NewActor with mailbox -1 = %v, %v; want ErrInvalid", a, err)
	}
	if g, err := singlewriter.NewGroup(2, func(int) int { return 0 }, bad); !errors.Is(err, singlewriter.ErrInvalid) || g != nil {
		t.Errorf("NewGroup with mailbox -1 = %v, %v; want ErrInvalid", g, err)
	}
}

// A context error from Do means the command did not run and never will; once
// started, the command's own result is returned.
func TestActorContextContract(t *testing.T) {
	t.Parallel()
	a := mustActor(t, 0, &singlewriter.ActorConfig{Mailbox: 1})
	defer a.Stop(ctx)
	release := make(chan struct{})
	started := make(chan struct{})
	blocked := make(chan error, 1)
	go func() {
		blocked <- a.Do(ctx, func(*int) error { close(started); <-release; return nil })
	}()
	<-started

	// Waiting in the mailbox, then cancelled: never runs.
	cctx, cancel := context.WithCancel(ctx)
	queued := make(chan error, 1)
	go func() { queued <- a.Do(cctx, func(n *int) error { *n += 100; return nil }) }()
	// Mailbox full (the queued command holds the only place): a third
	// submitter with a short deadline gives up without running.
	waitUntil(t, func() bool {
		short, c := context.WithTimeout(ctx, 10*time.Millisecond)
		defer c()
		return errors.Is(a.Do(short, func(n *int) error { *n += 1000; return nil }), context.DeadlineExceeded)
	})
	cancel()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled queued command: %v", err)
	}

	// Started, then cancelled: Do waits and reports the command's result.
	close(release)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	started2 := make(chan struct{})
	release2 := make(chan struct{})
	cctx2, cancel2 := context.WithCancel(ctx)
	res := make(chan error, 1)
	go func() {
		res <- a.Do(cctx2, func(n *int) error { close(started2); <-release2; *n += 10; return nil })
	}()
	<-started2
	cancel2()
	close(release2)
	if err := <-res; err != nil {
		t.Fatalf("started command reported %v, want its own nil result", err)
	}
	n, _ := singlewriter.Ask(ctx, a, func(n *int) (int, error) { return *n, nil })
	if n != 10 {
		t.Fatalf("state = %d, want 10 (only the started command applied)", n)
	}
}

// Stop drains: every command Do accepted is applied (Do returns its result),
// every other one reports ErrStopped and was not applied.
func TestActorStopDrains(t *testing.T) {
	t.Parallel()
	var applied sync.Map
	a := mustActor(t, 0, &singlewriter.ActorConfig{Mailbox: 100})
	gate := make(chan struct{})
	started := make(chan struct{})
	first := make(chan error, 1)
	go func() { first <- a.Do(ctx, func(n *int) error { close(started); <-gate; return nil }) }()
	<-started
	var wg sync.WaitGroup
	results := make([]error, 50)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = a.Do(ctx, func(n *int) error { applied.Store(i, true); return nil })
		}()
	}
	time.Sleep(10 * time.Millisecond) // let some submitters in before Stop
	stopped := make(chan error, 1)
	go func() { stopped <- a.Stop(ctx) }()
	time.Sleep(10 * time.Millisecond)
	close(gate)
	wg.Wait()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for i, err := range results {
		_, ran := applied.Load(i)
		switch {
		case err == nil && ran:
			accepted++
		case errors.Is(err, singlewriter.ErrStopped) && !ran:
		default:
			t.Fatalf("command %d: Do = %v, applied = %v", i, err, ran)
		}
	}
	t.Logf("%d of %d commands accepted before Stop, all applied", accepted, len(results))
	<-a.Stopped()
	if err := a.Do(ctx, func(*int) error { return nil }); !errors.Is(err, singlewriter.ErrStopped) {
		t.Fatalf("Do after Stop = %v, want ErrStopped", err)
	}
}

func TestGroupRoutesKeysToOneShard(t *testing.T) {
	t.Parallel()
	type shard struct {
		id   int
		keys map[string]int
	}
	g, err := singlewriter.NewGroup(4, func(i int) shard { return shard{id: i, keys: map[string]int{}} }, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h", "order-1", "order-2"}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, k := range keys {
				if err := g.Do(ctx, k, func(s *shard) error {
					if want := g.Shard(k); s.id != want {
						t.Errorf("key %q ran on shard %d, want %d", k, s.id, want)
					}
					s.keys[k]++
					return nil
				}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	for _, k := range keys {
		n, err := singlewriter.Ask(ctx, g.Actor(k), func(s *shard) (int, error) { return s.keys[k], nil })
		if err != nil || n != 4 {
			t.Errorf("key %q: %d, %v; want 4", k, n, err)
		}
	}
	if err := g.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	<-g.Stopped()
	if err := g.Do(ctx, "a", func(*shard) error { return nil }); !errors.Is(err, singlewriter.ErrStopped) {
		t.Fatalf("Do after Stop = %v", err)
	}
	for _, bad := range []struct {
		n  int
		fn func(int) shard
	}{{0, func(int) shard { return shard{} }}, {2, nil}} {
		if _, err := singlewriter.NewGroup(bad.n, bad.fn, nil); !errors.Is(err, singlewriter.ErrInvalid) {
			t.Errorf("NewGroup(%d) = %v, want ErrInvalid", bad.n, err)
		}
	}
}

func waitUntil(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 60s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestActorSurvivesGoexit: a command that calls runtime.Goexit (t.FailNow
// does) ends neither the actor nor its submitter's wait: Do and Ask return
// ErrGoexit, the commands queued behind it run, and Stop still drains.
func TestActorSurvivesGoexit(t *testing.T) {
	t.Parallel()
	a := mustActor(t, 0, &singlewriter.ActorConfig{Mailbox: 256})
	// watchdog fails the test rather than hang it when a call never returns;
	// the bound is far above any honest wait.
	watchdog := func(what string, call func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- call() }()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			t.Fatalf("%s never returned", what)
			return nil
		}
	}
	err := watchdog("Do of a Goexit", func() error {
		return a.Do(ctx, func(n *int) error { *n++; runtime.Goexit(); return nil })
	})
	if !errors.Is(err, singlewriter.ErrGoexit) {
		t.Fatalf("Do of a Goexit = %v, want ErrGoexit", err)
	}
	_, err = singlewriter.Ask(ctx, a, func(*int) (int, error) { runtime.Goexit(); return 0, nil })
	if !errors.Is(err, singlewriter.ErrGoexit) {
		t.Fatalf("Ask of a Goexit = %v, want ErrGoexit", err)
	}

	// Many submitters at once, every third command exits: those queued in
	// one batch behind an exit still run, and every submitter gets an answer.
	started, release := make(chan struct{}), make(chan struct{})
	go a.Do(ctx, func(*int) error { close(started); <-release; return nil })
	<-started
	const n = 90
	var submitted, wg sync.WaitGroup
	var exits, incs atomic.Int64
	for i := range n {
		submitted.Add(1)
		wg.Go(func() {
			submitted.Done()
			err := a.Do(ctx, func(s *int) error {
				if i%3 == 0 {
					runtime.Goexit()
				}
				*s++
				return nil
			})
			switch {
			case errors.Is(err, singlewriter.ErrGoexit):
				exits.Add(1)
			case err == nil:
				incs.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	submitted.Wait()
	close(release)
	watchdog("the submitters", func() error { wg.Wait(); return nil })
	if exits.Load() != n/3 || incs.Load() != n-n/3 {
		t.Fatalf("%d exits and %d increments, want %d and %d", exits.Load(), incs.Load(), n/3, n-n/3)
	}
	got, err := singlewriter.Ask(ctx, a, func(s *int) (int, error) { return *s, nil })
	if err != nil || got != 1+n-n/3 {
		t.Fatalf("state = %d, %v; want %d (the first exit's increment stays, as after a panic)", got, err, 1+n-n/3)
	}
	if err := watchdog("Stop", func() error { return a.Stop(ctx) }); err != nil {
		t.Fatal(err)
	}
	if err := a.Do(ctx, func(*int) error { return nil }); !errors.Is(err, singlewriter.ErrStopped) {
		t.Fatalf("Do after Stop = %v, want ErrStopped", err)
	}
}
