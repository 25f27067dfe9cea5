// Command documents is the migration guide from a lock around editing a
// document to optimistic updates with versions and If-Match (package occ):
// five editors, one of whom pauses past its lease. See README.md.
//
//	go run ./examples/documents [-postgres URL|memory] [-mode lock|alternative|both] [-pause=false]
package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/examples/internal/demo"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/occ"
)

//go:embed schema.sql
var schemaSQL string

const (
	docID   = "handbook"
	title   = "# Handbook\n"
	editors = 5               // each adds one line
	ttl     = 1 * time.Second // the lock's lease
)

// Document is a row of the documents table; occ maps it by its db tags.
type Document struct {
	ID      string `db:"id"`
	Body    string `db:"body"`
	Version int64  `db:"version"`
}

// config is what the program runs with. With Pause, editor 1 stops between
// its read and its write until its lease has expired and every other
// editor has saved.
type config = demo.Config

func main() { demo.Main("documents", "pause editor 1 past its lease", run) }

// run lets the editors edit once per approach the mode selects and prints
// one line per approach, then (alternative) the HTTP exchange.
func run(ctx context.Context, cfg config, w io.Writer) error {
	lock, alt, err := demo.Modes(cfg.Mode)
	if err != nil {
		return err
	}
	if err := demo.Migrate(ctx, cfg.DB, schemaSQL, fencedlock.Migrations()); err != nil {
		return err
	}
	if lock {
		for _, fenced := range []bool{false, true} {
			p := newPages(cfg.DB)
			locks, expire := demo.Locks(cfg.DB, "documents/"+docID, ttl)
			edit, label := editNaive, "lock (naive)"
			if fenced {
				edit, label = editFenced, "lock (fenced)"
			}
			t, err := session(ctx, cfg, p.reset, p.read, expire, func(ctx context.Context, editor int, paused func()) error {
				return edit(ctx, locks, p, fmt.Sprintf("editor-%d", editor), line(editor), paused)
			})
			if err != nil {
				return fmt.Errorf("%s: %w", label, err)
			}
			t.print(w, label)
		}
	}
	if alt {
		docs, err := newStore(cfg.DB)
		if err != nil {
			return err
		}
		reset := func(ctx context.Context) error { return insertFresh(ctx, cfg.DB, docs, docID) }
		read := func(ctx context.Context) (string, error) { d, _, err := docs.Load(ctx, docID); return d.Body, err }
		var retries int
		t, err := session(ctx, cfg, reset, read, nil, func(ctx context.Context, editor int, paused func()) error {
			return editOCC(ctx, docs, line(editor), paused, func() { retries++ })
		})
		if err != nil {
			return fmt.Errorf("occ: %w", err)
		}
		t.retries = retries
		t.print(w, "occ")
		if err := overHTTP(ctx, cfg.DB, docs, w); err != nil {
			return fmt.Errorf("http: %w", err)
		}
	}
	return nil
}

func line(editor int) string { return fmt.Sprintf("- note from editor %d\n", editor) }

// wait polls a busy lock often: the example's holders are quick.
var wait = &fencedlock.WaitConfig{MaxDelay: 20 * time.Millisecond}

// --- Before: the lock-based code -------------------------------------------

// editNaive is the code being replaced: a lease lock around load → edit →
// save. When a holder outlives its lease, the next holder loads the same
// body, and the late save overwrites every edit made in between.
func editNaive(ctx context.Context, locks fencedlock.Store, p pages, holder, line string, paused func()) error {
	lease, err := fencedlock.AcquireWait(ctx, locks, "documents/"+docID, holder, ttl, wait)
	if err != nil {
		return err
	}
	defer func() { _ = locks.Release(context.WithoutCancel(ctx), lease) }() // ErrNotHeld once the lease has run out

	body, err := p.read(ctx) // SELECT body FROM documents WHERE id = $1
	if err != nil {
		return err
	}
	paused()                       // a GC pause, swap, a VM migration, SIGSTOP …
	return p.write(ctx, body+line) // UPDATE documents SET body = $2, version = version + 1 WHERE id = $1
}

// editFenced is the same lock done right: the load stamps the row with the
// lease's fencing token and the save is accepted only if no later token has
// touched the row since; a holder that outlived its lease is refused
// (fencedlock.ErrFenced) and must load and edit again.
func editFenced(ctx context.Context, locks fencedlock.Store, p pages, holder, line string, paused func()) error {
	lease, err := fencedlock.AcquireWait(ctx, locks, "documents/"+docID, holder, ttl, wait)
	if err != nil {
		return err
	}
	defer func() { _ = locks.Release(context.WithoutCancel(ctx), lease) }()

	body, err := p.fencedRead(ctx, lease.Token) // UPDATE … SET fencing_token = $t WHERE id = $1 AND fencing_token <= $t RETURNING body
	if err != nil {
		return err
	}
	paused()
	return p.fencedWrite(ctx, lease.Token, body+line) // … AND fencing_token <= $t
}

// --- After: optimistic updates ------------------------------------------------

// editOCC is the replacement: load the row and its version, edit, and save
// with UPDATE … SET body = $2, version = version + 1 WHERE id = $1 AND
// version = $3. A save based on a stale load matches no row and is a
// *occ.ConflictError; occ.Update then loads the new row and applies the
// edit again (up to occ.DefaultRetry's 5 attempts).
func editOCC(ctx context.Context, docs occ.Store[string, Document], line string, paused func(), onRetry func()) error {
	_, err := occ.Update(ctx, docs, docID, func(d *Document) error {
		paused() // the same pause, between load and save
		d.Body += line
		return nil
	}, occ.OnRetry(func(attempt int, err error) { onRetry() }))
	return err
}

// newStore returns the optimistic store of documents, keyed by their id:
// the table, or memory.
func newStore(db *pgxpool.Pool) (occ.Store[string, Document], error) {
	if db == nil {
		return occ.NewMemory[string, Document](nil)
	}
	return occ.NewPostgres[string, Document](db, "documents", nil)
}

// --- The run ------------------------------------------------------------------

// tally counts the outcomes of one editing session.
type tally struct {
	saved, fenced, present, retries int
}

func (t tally) print(w io.Writer, label string) {
	fmt.Fprintf(w, "%s: %d of %d saves acknowledged, %s in the document", label, t.saved, editors, demo.Plural(t.present, "edit"))
	if lost := t.saved - t.present; lost > 0 {
		fmt.Fprintf(w, " — %d lost", lost)
	}
	if t.fenced > 0 {
		fmt.Fprintf(w, "; %d save fenced off after its pause (load and edit again)", t.fenced)
	}
	if label == "occ" {
		fmt.Fprintf(w, "; %s after a version conflict", demo.Plural(t.retries, "retry", "retries"))
	}
	fmt.Fprintln(w)
}

// session resets the document and lets the editors add a line each. Editor
// 1 starts first; with cfg.Pause it stops where edit calls paused (the
// first time) until its lease has expired (expire, when the approach has a
// lease) and editors 2–5 have saved one after another; then it wakes and
// saves.
func session(ctx context.Context, cfg config, reset func(context.Context) error, read func(context.Context) (string, error),
	expire func(context.Context) error, edit func(ctx context.Context, editor int, paused func()) error) (tally, error) {
	if err := reset(ctx); err != nil {
		return tally{}, err
	}
	var (
		t    tally
		errs []error
	)
	record := func(err error) {
		switch {
		case errors.Is(err, fencedlock.ErrFenced):
			t.fenced++
		case err != nil:
			errs = append(errs, err)
		default:
			t.saved++
		}
	}
	err1, err := demo.WhilePaused(cfg.Pause, func(paused func()) error { return edit(ctx, 1, paused) }, func() error {
		if cfg.Pause && expire != nil {
			if err := expire(ctx); err != nil {
				return err
			}
		}
		for e := 2; e <= editors; e++ {
			record(edit(ctx, e, func() {}))
		}
		return nil
	})
	if err != nil {
		return tally{}, err
	}
	record(err1)
	body, err := read(ctx)
	if err != nil {
		return tally{}, err
	}
	for e := 1; e <= editors; e++ {
		if strings.Contains(body, line(e)) {
			t.present++
		}
	}
	return t, errors.Join(errs...)
}
