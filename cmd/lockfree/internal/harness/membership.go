package harness

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/partition"
)

// recordingMembership is a partition member's store, with each membership
// lease it grants or extends, each partition it hands over and each one it
// takes back reported as an event with the time its request was sent: the
// tenures of the exclusivity check, as recordingLocks reports a lock's.
type recordingMembership struct {
	partition.Membership
	env *Env
}

var _ partition.Membership = recordingMembership{}

func (r recordingMembership) Join(ctx context.Context, m partition.MemberInfo, ttl time.Duration) (partition.MemberInfo, error) {
	sent := history.Now()
	info, err := r.Membership.Join(ctx, m, ttl)
	if err == nil {
		r.report(event{Ev: evMember, Name: info.Name, Token: info.Incarnation, TTL: ttl}, sent)
	}
	return info, err
}

func (r recordingMembership) Heartbeat(ctx context.Context, name string, incarnation int64, ttl time.Duration) error {
	sent := history.Now()
	err := r.Membership.Heartbeat(ctx, name, incarnation, ttl)
	if err == nil {
		r.report(event{Ev: evMember, Name: name, Token: incarnation, TTL: ttl}, sent)
	}
	return err
}

func (r recordingMembership) Leave(ctx context.Context, name string, incarnation int64) error {
	sent := history.Now()
	err := r.Membership.Leave(ctx, name, incarnation)
	if err == nil {
		r.report(event{Ev: evLeave, Name: name, Token: incarnation}, sent)
	}
	return err
}

func (r recordingMembership) Claim(ctx context.Context, member string, incarnation int64, partitions []int) ([]partition.Epoch, error) {
	sent := history.Now()
	es, err := r.Membership.Claim(ctx, member, incarnation, partitions)
	for _, e := range es {
		r.report(event{Ev: evClaim, Name: partitionName(e.Partition), Token: e.Token, Incarnation: incarnation}, sent)
	}
	return es, err
}

// Release reports each epoch it released: those no *StaleEpochError names.
func (r recordingMembership) Release(ctx context.Context, epochs []partition.Epoch) error {
	sent := history.Now()
	err := r.Membership.Release(ctx, epochs)
	stale := map[int]bool{}
	for _, e := range joined(err) {
		se, ok := errors.AsType[*partition.StaleEpochError](e)
		if !ok {
			return err // which epochs were released is unknown: none is reported
		}
		stale[se.Partition] = true
	}
	for _, e := range epochs {
		if !stale[e.Partition] {
			r.report(event{Ev: evDisown, Name: partitionName(e.Partition), Token: e.Token}, sent)
		}
	}
	return err
}

// act reports that operation op's call under ownership ep begins.
func (e *Env) act(op *Op, ep partition.Epoch) {
	if e.w != nil {
		_ = e.w.out.event(event{Ev: evAct, T: history.Now(), Name: partitionName(ep.Partition), Token: ep.Token, Op: op.ID()})
	}
}

// refused reports that the store refused op's write under ownership ep as
// stale (its epoch not the partition's): the refusal had come back by now.
func (e *Env) refused(op *Op, ep partition.Epoch) {
	if e.w != nil {
		_ = e.w.out.event(event{Ev: evRefuse, T: history.Now(), Name: partitionName(ep.Partition), Token: ep.Token, Op: op.ID()})
	}
}

func (r recordingMembership) report(ev event, sent history.Time) {
	if r.env.w == nil {
		return
	}
	ev.T, ev.Sent = history.Now(), sent
	// Evidence for the exclusivity check only; a worker whose output is
	// gone is halted by its run loop.
	_ = r.env.w.out.event(ev)
}

func partitionName(p int) string { return "partition/" + strconv.Itoa(p) }

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
