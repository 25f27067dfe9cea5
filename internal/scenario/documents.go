package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/occ"
)

const documentsDDL = `CREATE TABLE documents (
	id            text   PRIMARY KEY,
	edits         bigint NOT NULL DEFAULT 0,
	version       bigint NOT NULL DEFAULT 1,
	fencing_token bigint NOT NULL DEFAULT 0
)`

// The statements of the documents scenario that are the harness's own: the
// raw approach's one statement, and the naive lock's write — occ.Fenced's
// write (UPDATE … SET edits, version + 1, fencing_token WHERE id AND
// fencing_token <= token) without the token.
const (
	sqlDocumentsSeed  = `INSERT INTO documents (id) SELECT 'doc-' || i FROM generate_series(0, $1 - 1) AS i`
	sqlDocumentsRaw   = `UPDATE documents SET edits = edits + 1, version = version + 1 WHERE id = $1`
	sqlDocumentsNaive = `UPDATE documents SET edits = $1, version = version + 1 WHERE id = $2`
	sqlDocumentsEdits = `SELECT edits FROM documents WHERE id = $1`
)

// document is the row the clients edit: each accepted edit adds one to
// Edits, so a lost update shows as a missing count.
type document struct {
	ID      string `db:"id"`
	Edits   int64  `db:"edits"`
	Version int64  `db:"version"`
}

func init() {
	register(Scenario{
		Name:        "documents",
		Description: "clients edit a random document (read, change, write); no accepted edit is lost",
		Approaches:  []Approach{Alternative, FencedLock, NaiveLock, Raw},
		Labels: map[Approach]string{
			Alternative: "occ.Update: SELECT the row, change, UPDATE … WHERE version = $v; retry on conflict",
			FencedLock:  "occ.Fenced on fencedlock.Locker: acquire, fenced read (stamps and returns the row), change, fenced write, release",
			NaiveLock:   "the same Locker without the fence: acquire, SELECT the row, change, UPDATE without the token, release",
			Raw:         "the minimal statement: UPDATE … SET edits = edits + 1, version = version + 1 (no read, no lock)",
		},
		New: newDocuments,
	})
}

type documents struct {
	env      *Env
	approach Approach
	keys     []string
	accepted []atomic.Int64
	unsure   []atomic.Int64
	store    occ.Store[string, document]
	twin     *occ.Fenced[string, document]
	naive    *naiveDocuments
}

func newDocuments(ctx context.Context, env *Env, a Approach) (Workload, error) {
	if env.Memory() && a == Raw {
		return nil, errSkip
	}
	w := &documents{env: env, approach: a}
	for i := 0; i < env.Keys; i++ {
		w.keys = append(w.keys, "doc-"+strconv.Itoa(i))
	}
	w.accepted = make([]atomic.Int64, env.Keys)
	w.unsure = make([]atomic.Int64, env.Keys)
	var err error
	if w.store, err = w.seed(ctx); err != nil {
		return nil, err
	}
	if a != FencedLock && a != NaiveLock {
		return w, nil
	}
	locks := env.Locks
	if !env.Memory() {
		// Waiters are woken by NOTIFY on release, not by polling alone.
		if locks, err = fencedlock.NewPostgres(env.DB, &fencedlock.PostgresConfig{Notify: true}); err != nil {
			return nil, err
		}
	}
	cfg := fencedlock.LockerConfig{
		TTL:  env.LeaseTTL,
		Wait: &fencedlock.WaitConfig{MinDelay: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond},
		// One lease, not renewed: the harness's pause stalls one
		// goroutine, whose keepalive would go on renewing the lease,
		// where a stopped process renews nothing.
		Keepalive:  &fencedlock.KeepaliveConfig{NoRenew: true},
		LockPrefix: "occ/documents/",
	}
	if a == FencedLock {
		w.twin, err = occ.NewFenced(locks, w.store, &occ.FencedConfig{LockerConfig: cfg})
	} else {
		w.naive, err = newNaiveDocuments(env, locks, w.store, &cfg)
	}
	return w, err
}

// seed creates the documents, at version 1 with no edits, and returns the
// store of them.
func (w *documents) seed(ctx context.Context) (occ.Store[string, document], error) {
	if w.env.Memory() {
		m, err := occ.NewMemory[string, document](nil)
		if err != nil {
			return nil, err
		}
		for _, k := range w.keys {
			if _, err := m.Insert(ctx, document{ID: k}); err != nil {
				return nil, err
			}
		}
		return m, nil
	}
	if _, err := w.env.Admin.Exec(ctx, documentsDDL); err != nil {
		return nil, err
	}
	if _, err := w.env.Admin.Exec(ctx, sqlDocumentsSeed, w.env.Keys); err != nil {
		return nil, err
	}
	return occ.NewPostgres[string, document](w.env.DB, "documents", nil)
}

// naiveDocuments is the naive lock: occ.Fenced's flow on the same
// fencedlock.Locker, with the same statements minus the fence — a plain
// read where the twin stamps the row, and a write without the token
// condition — so that the pair differs in the fence alone.
type naiveDocuments struct {
	locker *fencedlock.Locker
	store  occ.Store[string, document]
	env    *Env
}

func newNaiveDocuments(env *Env, locks fencedlock.Store, store occ.Store[string, document], cfg *fencedlock.LockerConfig) (*naiveDocuments, error) {
	locker, err := fencedlock.NewLocker(locks, cfg)
	return &naiveDocuments{locker: locker, store: store, env: env}, err
}

// update locks key, reads its row, edits it and writes it back over
// whatever the row holds by then.
func (n *naiveDocuments) update(ctx context.Context, key string, edit func(*document) error) error {
	return n.locker.Do(ctx, key, func(context.Context, fencedlock.Lease) error {
		d, _, err := n.store.Load(ctx, key)
		if err != nil {
			return err
		}
		if err := edit(&d); err != nil {
			return err
		}
		if !n.env.Memory() {
			_, err = n.env.DB.Exec(ctx, sqlDocumentsNaive, d.Edits, key)
			return err
		}
		// The memory store has no unconditional write: write at whatever
		// version the row is at now, which under the lock is the one read
		// unless a paused former holder wrote in between.
		for {
			_, cur, err := n.store.Load(ctx, key)
			if err != nil {
				return err
			}
			if _, err = n.store.Update(ctx, d, cur); !errors.Is(err, occ.ErrConflict) {
				return err
			}
		}
	})
}

func (w *documents) Op(ctx context.Context, client int, rnd *rand.Rand) Outcome {
	k := rnd.IntN(len(w.keys))
	edit := func(d *document) error {
		w.env.Pause(ctx, rnd) // between the read and the write
		d.Edits++
		return nil
	}
	var (
		err     error
		retries int
	)
	switch w.approach {
	case Alternative:
		_, err = occ.Update(ctx, w.store, w.keys[k], edit, occ.OnRetry(func(int, error) { retries++ }))
		if errors.Is(err, occ.ErrConflict) {
			return Outcome{Rejected: true, Retries: retries}
		}
	case Raw:
		w.env.Pause(ctx, rnd)
		_, err = w.env.DB.Exec(ctx, sqlDocumentsRaw, w.keys[k])
	case FencedLock:
		_, err = w.twin.Update(ctx, w.keys[k], edit)
	default:
		err = w.naive.update(ctx, w.keys[k], edit)
	}
	out := writeOutcome(err)
	if out.Err != nil && !out.Uncertain && errors.Is(err, fencedlock.ErrHeld) {
		out.Err = nil
		out.Rejected = true
	}
	out.Retries = retries
	switch {
	case out.Uncertain:
		w.unsure[k].Add(1)
	case out.Err == nil && !out.Rejected:
		w.accepted[k].Add(1)
	}
	return out
}

func (w *documents) Check(ctx context.Context) (int64, string, error) {
	var lost, phantom int64
	for i, k := range w.keys {
		var edits int64
		if w.env.Memory() {
			d, _, err := w.store.Load(ctx, k)
			if err != nil {
				return 0, "", err
			}
			edits = d.Edits
		} else if err := w.env.Admin.QueryRow(ctx, sqlDocumentsEdits, k).Scan(&edits); err != nil {
			return 0, "", err
		}
		acc, unsure := w.accepted[i].Load(), w.unsure[i].Load()
		switch {
		case edits < acc:
			lost += acc - edits
		case edits > acc+unsure:
			phantom += edits - acc - unsure
		}
	}
	if lost+phantom == 0 {
		return 0, "", nil
	}
	return lost + phantom, fmt.Sprintf("%d accepted edits lost (overwritten), %d edits present that no client was told of", lost, phantom), nil
}
