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
			Alternative: "occ.Update: read, change, UPDATE … WHERE version = $v, retry on conflict",
			FencedLock:  "occ.Fenced: lock document → read → change → fenced write → release",
			NaiveLock:   "lease lock: lock document → read → change → unfenced write → release",
			Raw:         "bare SQL: UPDATE … SET edits = edits + 1 (no read-modify-write)",
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
	store    occ.Store[document]
	twin     *occ.Fenced[document]
}

func newDocuments(ctx context.Context, env *Env, a Approach) (Workload, error) {
	w := &documents{env: env, approach: a}
	for i := 0; i < env.Keys; i++ {
		w.keys = append(w.keys, "doc-"+strconv.Itoa(i))
	}
	w.accepted = make([]atomic.Int64, env.Keys)
	w.unsure = make([]atomic.Int64, env.Keys)
	cfg := occ.TableConfig{Table: "documents"}
	if env.Memory() {
		if a == Raw {
			return nil, errSkip
		}
		m, err := occ.NewMemory[document](cfg)
		if err != nil {
			return nil, err
		}
		for _, k := range w.keys {
			if _, err := m.Insert(ctx, document{ID: k}); err != nil {
				return nil, err
			}
		}
		w.store = m
	} else {
		if _, err := env.Admin.Exec(ctx, documentsDDL); err != nil {
			return nil, err
		}
		if _, err := env.Admin.Exec(ctx, `INSERT INTO documents (id) SELECT 'doc-' || i FROM generate_series(0, $1 - 1) AS i`, env.Keys); err != nil {
			return nil, err
		}
		p, err := occ.NewPostgres[document](env.DB, cfg)
		if err != nil {
			return nil, err
		}
		w.store = p
	}
	if a == FencedLock || a == NaiveLock {
		twin, err := occ.NewFenced(env.Locks, w.store, occ.FencedConfig{
			TTL:      env.LeaseTTL,
			Wait:     &fencedlock.WaitConfig{MinDelay: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond, Wakeups: wakeups(env.Locks)},
			Unfenced: a == NaiveLock,
		})
		if err != nil {
			return nil, err
		}
		w.twin = twin
	}
	return w, nil
}

func (w *documents) Op(ctx context.Context, client int, rnd *rand.Rand) Outcome {
	k := rnd.IntN(len(w.keys))
	edit := func(d *document) error {
		w.env.Pause(ctx, rnd) // between the read and the write
		d.Edits++
		return nil
	}
	var (
		out     Outcome
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
		_, err = w.env.DB.Exec(ctx, `UPDATE documents SET edits = edits + 1 WHERE id = $1`, w.keys[k])
	default:
		_, err = w.twin.Update(ctx, w.keys[k], edit)
	}
	out = writeOutcome(err)
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
		} else if err := w.env.Admin.QueryRow(ctx, `SELECT edits FROM documents WHERE id = $1`, k).Scan(&edits); err != nil {
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
