package engine

import (
	"context"
	"fmt"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// Claiming is called by a client before it sends the claim of a lease that
// is not the lock service's (an idempotency attempt's): while the
// late-renewal fault keeps the key of ctx's operation from this worker, it
// blocks, as an acquire through Env.Locks does.
func (e *Env) Claiming(ctx context.Context) {
	if e.w == nil {
		return
	}
	for _, h := range e.w.lockHooks() {
		h.acquiring(ctx)
	}
}

// Renewal sends the renewal of the lease (name, token) that renew makes, as
// Env.Locks sends its own: the late-renewal fault may hold it before it is
// sent and send it late, whoever still waits for it. renew gets a context
// that outlasts ctx (WriteTimeout from the send) and the time it was sent,
// for its Evidence: a renewal sent late and made extends a lease all the
// same, and the exclusivity check must see it. Renewal returns renew's
// answer, or ctx's error when ctx ends first.
func Renewal[T any](ctx context.Context, e *Env, name string, token int64, renew func(ctx context.Context, sent history.Time) (T, error)) (T, error) {
	return renewal(ctx, e.w, name, token, renew)
}

// renewal is Renewal for worker w, nil outside a worker.
func renewal[T any](ctx context.Context, w *worker, name string, token int64, renew func(ctx context.Context, sent history.Time) (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		var key string
		if op := opFrom(ctx); op != nil {
			key = op.key
		}
		var holder lockHook
		if w != nil {
			for _, h := range w.lockHooks() {
				if h.renewing(key, name, token) {
					holder = h
					break
				}
			}
		}
		sent := history.Now() // when a held renewal is let go
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), WriteTimeout)
		defer cancel()
		v, err := renew(rctx, sent)
		if holder != nil {
			holder.renewed(key, name, token, err)
		}
		done <- answer{v, err}
	}()
	select {
	case a := <-done:
		return a.v, a.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("engine: renew %s token %d: %w", name, token, context.Cause(ctx))
	}
}
