package harness

import (
	"context"
	"strconv"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/occ"
)

// documentsFenced edits with occ.Fenced: lock the document, fenced read,
// change, fenced write, release. A holder that pauses past its lease wakes
// with a token the row has seen a higher one than: its write is refused.
type documentsFenced struct{}

func init() { RegisterApproach(documentsFenced{}) }

func (documentsFenced) Scenario() string   { return "documents" }
func (documentsFenced) Approach() Approach { return FencedLock }
func (documentsFenced) Label() string {
	return "occ.Fenced: lock document → fenced read → change → fenced write → release"
}
func (documentsFenced) Protection(p Params) Protection {
	return lockTTL(p)
}

func (documentsFenced) NewClient(_ context.Context, env *Env) (Client, error) {
	s, err := occ.NewPostgres[string, document](env.DB, "documents", nil)
	if err != nil {
		return nil, err
	}
	f, err := occ.NewFenced(env.Locks, s, &occ.FencedConfig{LockerConfig: fencedlock.LockerConfig{
		TTL:           env.LeaseTTL,
		Holder:        "worker-" + strconv.Itoa(env.Client),
		Wait:          &fencedlock.WaitConfig{MinDelay: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond},
		MeterProvider: env.MeterProvider,
	}})
	if err != nil {
		return nil, err
	}
	return &documentsFencedClient{env: env, twin: f}, nil
}

type documentsFencedClient struct {
	env  *Env
	twin *occ.Fenced[string, document]
	n    int
}

func (c *documentsFencedClient) Op(ctx context.Context) error {
	ctx, op, name, err := docEdit(ctx, c.env, &c.n)
	if err != nil {
		return err
	}
	var based history.DocState
	_, err = c.twin.Update(ctx, op.key, func(d *document) error {
		based = d.edit(name)
		return nil // occ.fenced.before-write follows
	})
	return op.Finish(based, err, errFenced)
}

func (c *documentsFencedClient) Close() error { return nil }
