package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/lockfreetest"
	"github.com/lockfree-go/lockfree/examples/internal/exampletest"
	"github.com/lockfree-go/lockfree/fencedlock"
	point "github.com/lockfree-go/lockfree/lockfreetest"
	"github.com/lockfree-go/lockfree/occ"
)

// editor is one edit by the code under test, on worker w's pool: it adds
// line to the handbook; paused marks the point between its load and its
// save.
type editor func(ctx context.Context, w *lockfreetest.Worker, holder, line string, paused func()) error

// holders numbers the lock holders of this worker process.
var holders atomic.Int64

// documentsTest runs edit on four workers, all on the handbook, under
// Pause: a worker stopped at edit's paused() past the lease, while another
// edits. Each edit adds a line of its own, drawn at random.
func documentsTest(name string, edit editor) lockfreetest.Test[string, struct{}] {
	return lockfreetest.Test[string, struct{}]{
		Name: name, Workers: 4, Keys: 1, Duration: 2 * time.Second, Lease: ttl,
		Faults: []lockfreetest.Fault{lockfreetest.Pause},
		Init: func(ctx context.Context, db *pgxpool.Pool, _ []string) error {
			if _, err := db.Exec(ctx, schemaSQL); err != nil {
				return err
			}
			return pgPages{db}.reset(ctx)
		},
		Input: func(r *rand.Rand, _ string) string { return fmt.Sprintf("- note %016x\n", r.Uint64()) },
		Op: func(ctx context.Context, w *lockfreetest.Worker, _ string, line string) (struct{}, error) {
			holder := fmt.Sprintf("worker-%d/%d", w.ID, holders.Add(1))
			return struct{}{}, edit(ctx, w, holder, line, func() { point.Point(ctx, "before-write") })
		},
		Refusals: []error{fencedlock.ErrFenced, occ.ErrConflict},
		Check:    checkEdits,
	}
}

// checkEdits holds the handbook to the saves told: each acknowledged edit's
// line is in it once, a refused one's is not, an uncertain one's at most
// once, and no other line is.
func checkEdits(ctx context.Context, db *pgxpool.Pool, h lockfreetest.History[string, struct{}]) error {
	body, err := pgPages{db}.read(ctx)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(body, title) {
		return fmt.Errorf("the handbook lost its title: %.40q", body)
	}
	present := map[string]int{}
	for _, l := range strings.SplitAfter(strings.TrimPrefix(body, title), "\n") {
		if l != "" {
			present[l]++
		}
	}
	var errs []error
	for _, op := range h {
		n := present[op.Input]
		delete(present, op.Input)
		switch {
		case op.Outcome == lockfreetest.OK && n == 0:
			errs = append(errs, fmt.Errorf("%s: save acknowledged, its line %q lost", op.ID, op.Input))
		case op.Outcome == lockfreetest.Fail && n > 0:
			errs = append(errs, fmt.Errorf("%s: save refused, yet its line %q is in the handbook", op.ID, op.Input))
		case n > 1:
			errs = append(errs, fmt.Errorf("%s: its line %q is in the handbook %d times", op.ID, op.Input, n))
		}
	}
	for l := range present {
		errs = append(errs, fmt.Errorf("line %q is in the handbook, from no edit", l))
	}
	return errors.Join(errs...)
}

// The three versions of the edit under lockfreetest's Pause. The naive lock
// loses acknowledged edits: its paused editor saves its stale copy over
// them. The fenced lock refuses that save; optimistic updates see the
// version moved, load again and edit again.
func TestDocumentsUnderPause(t *testing.T) {
	cases := []struct {
		name string
		edit editor
		want exampletest.Want
	}{
		{"naive", func(ctx context.Context, w *lockfreetest.Worker, holder, line string, paused func()) error {
			locks, err := fencedlock.NewPostgres(w.DB, nil)
			if err != nil {
				return err
			}
			return editNaive(ctx, locks, pgPages{w.DB}, holder, line, paused)
		}, exampletest.Violates},
		{"fenced", func(ctx context.Context, w *lockfreetest.Worker, holder, line string, paused func()) error {
			locks, err := fencedlock.NewPostgres(w.DB, nil)
			if err != nil {
				return err
			}
			return editFenced(ctx, locks, pgPages{w.DB}, holder, line, paused)
		}, exampletest.Refuses},
		{"occ", func(ctx context.Context, w *lockfreetest.Worker, _, line string, paused func()) error {
			docs, err := newStore(w.DB)
			if err != nil {
				return err
			}
			return editOCC(ctx, docs, line, paused, func() {})
		}, exampletest.Holds},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			exampletest.Judge(t, c.name, c.want, lockfreetest.Run(t, documentsTest(c.name, c.edit)))
		})
	}
}
