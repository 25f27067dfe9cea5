package documents

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/lockfree-go/lockfree/internal/opid"
	"github.com/lockfree-go/lockfree/occ"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// A client of the alternative gives one edit in probeOdds an operation ID
// (occ.WithID) and, once the edit applied, misuses the ID (a hostile
// client of the store), in turn in each way of idProber.afterEdit; each is
// a promise of occ's operation IDs, and an answer it rules out is a
// violation (Env.Broke):
//   - a late duplicate: the records past the store's Retention purged
//     (engine.PurgeAll), then the write sent again with its ID, at the
//     version it was based on: the version it left, not a second write;
//   - the ID with another operation (a delete of the document): ErrIDReused;
//   - the ID asked of another store sharing the operations table (one on
//     documents_gone): ErrIDReused, the other's outcome not told;
//   - a write of the document with an ID dated past the Retention:
//     ErrExpired;
//   - a fresh ID resolved before its write is sent (a client that gave up
//     on an answer it never got): abandoned, and the write then sent with
//     it ErrAbandoned.
//
// Every probe's write is at a version the document has left (the one the
// edit was based on): a store that broke its promise conflicts instead of
// writing over the document.
const probeOdds = 16

// idProber probes one client's operation IDs.
type idProber struct {
	env   *engine.Env
	store *occ.Postgres[string, document] // the alternative's
	other *occ.Postgres[string, document] // on documents_gone, sharing the operations table
	n     int
}

func newIDProber(env *engine.Env, store *occ.Postgres[string, document]) (*idProber, error) {
	other, err := occ.NewPostgres[string, document](env.DB, "documents_gone", nil)
	if err != nil {
		return nil, err
	}
	return &idProber{env: env, store: store, other: other}, nil
}

// id returns the options of an edit's write: an ID one time in probeOdds.
func (p *idProber) id() []occ.Option {
	if p.env.Rand.IntN(probeOdds) != 0 {
		return nil
	}
	return []occ.Option{occ.WithID(uuid.Must(uuid.NewV7()))}
}

// afterEdit probes the ID in opts, if any, of an edit of key that left
// version.
func (p *idProber) afterEdit(ctx context.Context, key string, opts []occ.Option, version int64) {
	id, ok := occ.OperationID(opts...)
	if !ok || version < 2 {
		return
	}
	stale := document{ID: key}
	p.n++
	switch p.n % 5 {
	case 0:
		engine.PurgeAll(ctx, p.store.Purge)
		again, err := p.store.Update(ctx, stale, version-1, opts...)
		if answered(err) && (err != nil || again != version) {
			p.env.Broke(ctx, "the write of %s resent with its recorded ID %s after a purge was answered (version %d, %v), not version %d", key, id, again, err, version)
		}
	case 1:
		err := p.store.Delete(ctx, key, version, opts...)
		p.env.Expect(ctx, err, occ.ErrIDReused, storeErrors, fmt.Sprintf("the ID %s of an update of %s, sent with a delete of it,", id, key))
	case 2:
		_, err := p.other.Resolve(ctx, id)
		p.env.Expect(ctx, err, occ.ErrIDReused, storeErrors, fmt.Sprintf("the ID %s, recorded by the documents table's store, resolved by documents_gone's,", id))
	case 3:
		old := opid.At(time.Now().Add(-opid.DefaultRetention - time.Hour))
		_, err := p.store.Update(ctx, stale, version-1, occ.WithID(old))
		p.env.Expect(ctx, err, occ.ErrExpired, storeErrors, fmt.Sprintf("a write of %s with the ID %s, dated past the store's Retention,", key, old))
	case 4:
		fresh := uuid.Must(uuid.NewV7())
		out, err := p.store.Resolve(ctx, fresh)
		if !answered(err) {
			return
		}
		p.env.Expect(ctx, out.Err, occ.ErrAbandoned, storeErrors, fmt.Sprintf("the resolve of the fresh ID %s", fresh))
		_, err = p.store.Update(ctx, stale, version-1, occ.WithID(fresh))
		p.env.Expect(ctx, err, occ.ErrAbandoned, storeErrors, fmt.Sprintf("a write of %s with the ID %s, resolved before,", key, fresh))
	}
}

// answered: err is the store's answer (engine.Answered).
func answered(err error) bool { return engine.Answered(err, storeErrors...) }

var storeErrors = []error{occ.ErrIDReused, occ.ErrExpired, occ.ErrAbandoned, occ.ErrConflict, occ.ErrNotFound, occ.ErrInvalid}
