package approach

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/partition"
)

// Membership is a partition member's store, with each membership lease it
// grants or extends, each partition it hands over and each one it takes back
// reported to the engine with the time its request was sent: the tenures of
// the exclusivity check, as the engine's lock service reports a lock's.
type Membership struct {
	partition.Membership
	Env *engine.Env
}

var _ partition.Membership = Membership{}

// Join reports the membership lease it grants.
func (r Membership) Join(ctx context.Context, m partition.MemberInfo, ttl time.Duration) (partition.MemberInfo, error) {
	sent := history.Now()
	info, err := r.Membership.Join(ctx, m, ttl)
	if err == nil {
		r.report(engine.Evidence{Kind: engine.Joined, Name: info.Name, Token: info.Incarnation, TTL: ttl, Sent: sent})
	}
	return info, err
}

// Heartbeat reports the membership lease it extends. It waits for the
// store's answer even after the caller stopped waiting (the member's
// renewal loop gives up at its lease's local deadline), and reports a
// heartbeat the store made then too: it extended the lease all the same,
// and without it the member's next heartbeat would read, to the exclusivity
// check, as the revival of an expired lease. The caller gets the answer
// only if it comes in time; the request is bounded by engine.WriteTimeout.
func (r Membership) Heartbeat(ctx context.Context, name string, incarnation int64, ttl time.Duration) error {
	sent := history.Now()
	done := make(chan error, 1)
	go func() {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engine.WriteTimeout)
		defer cancel()
		err := r.Membership.Heartbeat(hctx, name, incarnation, ttl)
		if err == nil {
			r.report(engine.Evidence{Kind: engine.Joined, Name: name, Token: incarnation, TTL: ttl, Sent: sent})
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("harness: heartbeat %s incarnation %d: %w", name, incarnation, context.Cause(ctx))
	}
}

// Leave reports the membership lease it ends, or, when its answer never
// came, that it may have ended it.
func (r Membership) Leave(ctx context.Context, name string, incarnation int64) error {
	sent := history.Now()
	err := r.Membership.Leave(ctx, name, incarnation)
	r.report(engine.Evidence{Kind: engine.Left, Name: name, Token: incarnation, Sent: sent, Uncertain: err != nil})
	return err
}

// Claim reports each partition it claims, its epoch the token.
func (r Membership) Claim(ctx context.Context, member string, incarnation int64, partitions []int) ([]partition.Epoch, error) {
	sent := history.Now()
	es, err := r.Membership.Claim(ctx, member, incarnation, partitions)
	for _, e := range es {
		r.report(engine.Evidence{Kind: engine.Claimed, Name: PartitionName(e.Partition), Token: e.Token, Incarnation: incarnation, Sent: sent})
	}
	return es, err
}

// Release reports each epoch it released: those no *StaleEpochError names.
// When its answer never came (another error: a pause past its deadline, a
// lost connection), the server may have released them all: each is
// reported as uncertain, so that its ownership is no longer certainly in
// force from the request on — another member may claim it at once.
func (r Membership) Release(ctx context.Context, epochs []partition.Epoch) error {
	sent := history.Now()
	err := r.Membership.Release(ctx, epochs)
	stale := map[int]bool{}
	uncertain := false
	for _, e := range joined(err) {
		se, ok := errors.AsType[*partition.StaleEpochError](e)
		if !ok {
			uncertain = true
			break
		}
		stale[se.Partition] = true
	}
	for _, e := range epochs {
		if uncertain || !stale[e.Partition] {
			r.report(engine.Evidence{Kind: engine.Disowned, Name: PartitionName(e.Partition), Token: e.Token, Sent: sent, Uncertain: uncertain})
		}
	}
	return err
}

// report reports ev: evidence for the exclusivity check, of no operation
// (a member's heartbeats and claims are its background work).
func (r Membership) report(ev engine.Evidence) { r.Env.Report(context.Background(), ev) }

// Acting reports that operation op's call under ownership ep begins.
func Acting(ctx context.Context, env *engine.Env, ep partition.Epoch) {
	env.Report(ctx, engine.Evidence{Kind: engine.Acted, Name: PartitionName(ep.Partition), Token: ep.Token})
}

// RefusedStale reports that the store refused the write of the operation of
// ctx under ownership ep as stale (its epoch not the partition's): the
// refusal had come back by now.
func RefusedStale(ctx context.Context, env *engine.Env, ep partition.Epoch) {
	env.Report(ctx, engine.Evidence{Kind: engine.Refused, Name: PartitionName(ep.Partition), Token: ep.Token})
}

// PartitionName is the name partition p's ownership is reported under.
func PartitionName(p int) string { return "partition/" + strconv.Itoa(p) }

// joined returns the errors err joins (errors.Join), or err itself.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err != nil {
		return []error{err}
	}
	return nil
}
