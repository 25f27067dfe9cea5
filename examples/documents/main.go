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
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/examples/internal/backend"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/migrate"
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

type config struct {
	// DB is the database; nil runs everything on the memory backends.
	DB *pgxpool.Pool
	// Mode is "lock" (the code being replaced), "alternative" (optimistic
	// updates, and If-Match over HTTP) or "both".
	Mode string
	// Pause stops editor 1 between its read and its write until its lease
	// has expired and every other editor has saved.
	Pause bool
}

func main() {
	pg := flag.String("postgres", os.Getenv("DATABASE_URL"), `PostgreSQL URL; "memory" for the memory backends; empty: a throwaway local PostgreSQL if its binaries exist, else memory`)
	mode := flag.String("mode", "both", "lock, alternative or both")
	pause := flag.Bool("pause", true, "pause editor 1 past its lease")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := open(ctx, *pg, config{Mode: *mode, Pause: *pause}); err != nil {
		fmt.Fprintln(os.Stderr, "documents:", err)
		os.Exit(1)
	}
}

func open(ctx context.Context, pg string, cfg config) error {
	b, err := backend.Open(ctx, pg, os.Stdout)
	if err != nil {
		return err
	}
	defer b.Close()
	cfg.DB = b.Pool
	return run(ctx, cfg, os.Stdout)
}

// run lets the editors edit once per approach the mode selects and prints
// one line per approach, then (alternative) the HTTP exchange.
func run(ctx context.Context, cfg config, w io.Writer) error {
	lock, alt := cfg.Mode == "lock" || cfg.Mode == "both", cfg.Mode == "alternative" || cfg.Mode == "both"
	if !lock && !alt {
		return fmt.Errorf("unknown -mode %q (want lock, alternative or both)", cfg.Mode)
	}
	if cfg.DB != nil {
		if err := migrate.Up(ctx, cfg.DB, migrate.Names{}, fencedlock.Migrations()); err != nil {
			return err
		}
		if _, err := cfg.DB.Exec(ctx, schemaSQL); err != nil {
			return err
		}
	}
	if lock {
		for _, fenced := range []bool{false, true} {
			p, locks, expire := newLockSetup(cfg.DB)
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
		t, err := session(ctx, cfg, reset, read, func(context.Context) error { return nil },
			func(ctx context.Context, editor int, paused func()) error {
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

// --- Before: the lock-based code -------------------------------------------

// editNaive is the code being replaced: a lease lock around load → edit →
// save. When a holder outlives its lease, the next holder loads the same
// body, and the late save overwrites every edit made in between.
func editNaive(ctx context.Context, locks fencedlock.Store, p pages, holder, line string, paused func()) error {
	lease, err := fencedlock.AcquireWait(ctx, locks, "documents/"+docID, holder, ttl, waitConfig(locks))
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
	lease, err := fencedlock.AcquireWait(ctx, locks, "documents/"+docID, holder, ttl, waitConfig(locks))
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

// insertFresh (re)creates document id with only its title, at version 1.
func insertFresh(ctx context.Context, db *pgxpool.Pool, docs occ.Store[string, Document], id string) error {
	if db != nil {
		if _, err := db.Exec(ctx, `DELETE FROM documents WHERE id = $1`, id); err != nil {
			return err
		}
	} else if _, v, err := docs.Load(ctx, id); err == nil {
		if err := docs.Delete(ctx, id, v); err != nil {
			return err
		}
	}
	_, err := docs.Insert(ctx, Document{ID: id, Body: title})
	return err
}

// --- Over HTTP: ETag and If-Match ---------------------------------------------

// handler serves one document: GET answers the body with its version as
// ETag; PUT replaces the body only if If-Match names the current version
// (412 Precondition Failed otherwise, 428 Precondition Required without it).
func handler(docs occ.Store[string, Document]) http.Handler {
	return occ.RequireIfMatch(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/documents/")
		d, v, err := docs.Load(r.Context(), id)
		if occ.WriteError(w, err) {
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		switch r.Method {
		case http.MethodGet:
			w.Header().Set("ETag", occ.ETag(v))
			_, _ = io.WriteString(w, d.Body)
		case http.MethodPut:
			if !occ.CheckIfMatch(w, r, v, true) {
				return
			}
			body, _ := io.ReadAll(r.Body)
			d.Body = string(body)
			nv, err := docs.Update(r.Context(), d, v) // a save in between makes this a 412 too
			if occ.WriteError(w, err) {
				return
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("ETag", occ.ETag(nv))
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	}))
}

// overHTTP is the human-speed version of the same race: Alice and Bob open
// the document in their browsers, both edit, Bob saves first.
func overHTTP(ctx context.Context, db *pgxpool.Pool, docs occ.Store[string, Document], w io.Writer) error {
	if err := insertFresh(ctx, db, docs, "guide"); err != nil {
		return err
	}
	srv := httptest.NewServer(handler(docs))
	defer srv.Close()
	url := srv.URL + "/documents/guide"
	do := func(who, method, ifMatch, body string) (string, error) {
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			return "", err
		}
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if method == http.MethodPut {
			cond := "no If-Match"
			if ifMatch != "" {
				cond = "If-Match " + ifMatch
			}
			fmt.Fprintf(w, "http: %-5s PUT with %s → %s", who, cond, resp.Status)
			if tag := resp.Header.Get("ETag"); tag != "" {
				fmt.Fprintf(w, ", ETag %s", tag)
			}
			fmt.Fprintln(w)
		}
		return resp.Header.Get("ETag"), nil
	}
	alice, err := do("Alice", http.MethodGet, "", "")
	if err != nil {
		return err
	}
	bob, err := do("Bob", http.MethodGet, "", "")
	if err != nil {
		return err
	}
	steps := []struct{ who, ifMatch, body string }{
		{"Bob", bob, title + "- Bob's edit\n"},
		{"Alice", alice, title + "- Alice's edit\n"}, // based on the version Bob replaced: 412
		{"Alice", "", title + "- Alice's edit\n"},    // no If-Match: 428
	}
	for _, s := range steps {
		if _, err := do(s.who, http.MethodPut, s.ifMatch, s.body); err != nil {
			return err
		}
	}
	// Alice reloads, merges her edit into Bob's version, and saves again.
	current, err := do("Alice", http.MethodGet, "", "")
	if err != nil {
		return err
	}
	_, err = do("Alice", http.MethodPut, current, title+"- Bob's edit\n- Alice's edit\n")
	return err
}

// --- Where the document lives for the lock-based code ---------------------

// pages is the document as the lock-based code sees it: the documents
// table, or a variable when running on the memory backend.
type pages interface {
	reset(ctx context.Context) error
	read(ctx context.Context) (string, error)
	write(ctx context.Context, body string) error
	fencedRead(ctx context.Context, token int64) (string, error)
	fencedWrite(ctx context.Context, token int64, body string) error
}

// pgPages is the documents table.
type pgPages struct{ db *pgxpool.Pool }

// fence makes the documents table's reads and writes fenced by token.
var fence = fencedlock.Fence{Table: "documents", Key: "id", TokenColumn: "fencing_token"}

func (p pgPages) reset(ctx context.Context) error {
	_, err := p.db.Exec(ctx, `INSERT INTO documents (id, body) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET body = $2, version = 1, fencing_token = 0`, docID, title)
	return err
}

func (p pgPages) read(ctx context.Context) (body string, err error) {
	err = p.db.QueryRow(ctx, `SELECT body FROM documents WHERE id = $1`, docID).Scan(&body)
	return body, err
}

// write bumps the version too: while lock-based and optimistic writers
// coexist during the migration, a write that leaves the version alone is
// invisible to the optimistic ones, which would overwrite it.
func (p pgPages) write(ctx context.Context, body string) error {
	_, err := p.db.Exec(ctx, `UPDATE documents SET body = $2, version = version + 1 WHERE id = $1`, docID, body)
	return err
}

func (p pgPages) fencedRead(ctx context.Context, token int64) (body string, err error) {
	err = fence.Read(ctx, p.db, docID, token, "body", &body)
	return body, err
}

func (p pgPages) fencedWrite(ctx context.Context, token int64, body string) error {
	return fence.Update(ctx, p.db, docID, token, "body = $1, version = version + 1", body)
}

// memPages is the document in memory; its Gate plays the part of the token
// column.
type memPages struct {
	mu   sync.Mutex
	body string
	gate fencedlock.Gate
}

func (p *memPages) reset(context.Context) error {
	p.mu.Lock()
	p.body = title
	p.mu.Unlock()
	return nil
}

func (p *memPages) read(context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.body, nil
}

func (p *memPages) write(_ context.Context, body string) error {
	p.mu.Lock()
	p.body = body
	p.mu.Unlock()
	return nil
}

func (p *memPages) fencedRead(ctx context.Context, token int64) (body string, err error) {
	err = p.gate.Do(token, func() error { body, err = p.read(ctx); return err })
	return body, err
}

func (p *memPages) fencedWrite(ctx context.Context, token int64, body string) error {
	return p.gate.Do(token, func() error { return p.write(ctx, body) })
}

// --- Setup and the scenario ---------------------------------------------------

// newLockSetup returns the document, the lock service and the function that
// makes the paused editor's lease expire: on the memory backend the lock
// service's clock jumps past the lease; on PostgreSQL the database clock
// decides, so it waits for the lease to run out.
func newLockSetup(db *pgxpool.Pool) (pages, fencedlock.Store, func(context.Context) error) {
	if db == nil {
		c := &clock.Manual{}
		locks, _ := fencedlock.NewMemory(&fencedlock.MemoryConfig{Clock: c}) // a config with a clock is valid
		return &memPages{}, locks, func(context.Context) error { c.Advance(ttl); return nil }
	}
	locks, err := fencedlock.NewPostgres(db, nil)
	if err != nil {
		panic(err) // a nil config is valid
	}
	return pgPages{db}, locks, func(ctx context.Context) error {
		for {
			_, held, err := locks.Holder(ctx, "documents/"+docID)
			if err != nil || !held {
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func waitConfig(locks fencedlock.Store) *fencedlock.WaitConfig {
	cfg := &fencedlock.WaitConfig{MaxDelay: 20 * time.Millisecond}
	if w, ok := locks.(fencedlock.Wakeups); ok {
		cfg.Wakeups = w // the memory lock service wakes waiters on release
	}
	return cfg
}

// tally counts the outcomes of one editing session.
type tally struct {
	saved, fenced, present, retries int
}

func (t tally) print(w io.Writer, label string) {
	fmt.Fprintf(w, "%s: %d of %d saves acknowledged, %s in the document", label, t.saved, editors, plural(t.present, "edit"))
	if lost := t.saved - t.present; lost > 0 {
		fmt.Fprintf(w, " — %d lost", lost)
	}
	if t.fenced > 0 {
		fmt.Fprintf(w, "; %d save fenced off after its pause (load and edit again)", t.fenced)
	}
	if label == "occ" {
		fmt.Fprintf(w, "; %s after a version conflict", plural(t.retries, "retry", "retries"))
	}
	fmt.Fprintln(w)
}

// plural returns "1 edit", "2 edits" (or the given plural form).
func plural(n int, one string, many ...string) string {
	if n == 1 {
		return "1 " + one
	}
	if len(many) > 0 {
		return fmt.Sprintf("%d %s", n, many[0])
	}
	return fmt.Sprintf("%d %ss", n, one)
}

// session resets the document and lets the editors add a line each. Editor
// 1 starts first; with cfg.Pause it stops where edit calls paused (the
// first time) until its lease has expired (expire) and editors 2–5 have
// saved one after another; then it wakes and saves.
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

	isPaused, resume, first := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	go func() {
		first <- edit(ctx, 1, func() {
			once.Do(func() {
				if cfg.Pause {
					close(isPaused)
					<-resume
				}
			})
		})
	}()
	var err1 error
	done1 := false
	if cfg.Pause {
		select {
		case <-isPaused:
		case err1 = <-first: // finished without reaching its pause (e.g. an error)
			done1 = true
		}
		if err := expire(ctx); err != nil {
			return tally{}, err
		}
	} else {
		err1, done1 = <-first, true
	}
	for e := 2; e <= editors; e++ {
		record(edit(ctx, e, func() {}))
	}
	close(resume)
	if !done1 {
		err1 = <-first
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
