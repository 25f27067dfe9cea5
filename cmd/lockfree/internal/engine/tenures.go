package engine

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// The exclusivity check holds the lock service itself to its rules, in
// every run of every approach whose leases come through Env.Locks: no two
// tenures of one lock certainly in force at once (history.Exclusive), no
// lease renewed after it certainly expired (history.Revivals), no grant's
// token below an earlier grant's (history.Ascending). A fence
// refuses a stale holder's write whoever holds the lock, so a lock whose
// exclusivity broke can still leave the data right: these violations are the
// lock's, counted with the scenario's. The spans come from the workers'
// lease events, each with the time its request was sent and the time it
// returned (recordingLocks), so they need no fault to be known: a holder
// stopped, stalled or cut off keeps its lease until its last grant's or
// renewal's send time plus the TTL, and another is granted it only after.

// tenureMargin is how much of a lease the check does not count on: the TTL
// runs on the database server's clock, the events on the workers'
// CLOCK_MONOTONIC, and the two may drift apart a little over a lease.
func tenureMargin(ttl time.Duration) history.Time {
	return history.Time(10*time.Millisecond + ttl/10)
}

// tenureKey is one grant: a token is unique per lock, but a failover may
// hand one out twice (the foil's plain tokens).
type tenureKey struct {
	client int
	name   string
	token  int64
}

// tenureState is a grant being followed through its events.
type tenureState struct {
	t history.Tenure
	// last is when the last grant or renewal returned; ttl its TTL.
	last history.Time
	ttl  time.Duration
	// maybe is when the last renewal whose answer never came returned, if
	// it may have renewed the lease.
	maybe history.Time
	// released: the service released the grant (at t.To at the latest),
	// or may have.
	released bool
}

// expiry is the latest moment the lease may expire, by its grant and
// renewals (those that may have been made included) and the wall clock's
// steps.
func (s *tenureState) expiry(steps []wallStep) history.Time {
	return leaseExpiry(steps, max(s.last, s.maybe), s.ttl)
}

// arrival is the earliest a request sent at sent can have reached the
// server: the end of the cut it was sent in, if any.
func arrival(cuts []cut, sent history.Time) history.Time {
	for _, c := range cuts {
		if c.from <= sent && sent <= c.to {
			return c.to
		}
	}
	return sent
}

// leaseSpans turns the lease events of every client into tenures and
// renewals, in the order the events came, each renewal reaching the
// service no earlier than its client's cuts allow. An event without a send
// time (a Redis lock's) is not checked. Only what is certain counts: a
// grant whose answer never came starts no tenure, a renewal whose answer
// never came extends none and is judged as no revival (but a later
// renewal may come before the expiry it may have set), and a release whose
// answer never came ends the tenure's certain span when it was sent. The
// wall clock's steps count as wallclock.go says.
func leaseSpans(byClient map[int][]event, forgot []history.Time, cuts map[int][]cut, steps []wallStep) ([]history.Tenure, []history.Renewal) {
	var order []tenureKey
	open := map[tenureKey]*tenureState{}
	var renewals []history.Renewal
	for _, c := range slices.Sorted(maps.Keys(byClient)) {
		for _, ev := range byClient[c] {
			if ev.Sent == 0 {
				continue
			}
			k := tenureKey{client: c, name: ev.Name, token: ev.Token}
			s := open[k]
			switch {
			case ev.Ev == evLease && ev.Uncertain:
				// The grant may have been made, with a token no one saw:
				// no tenure the holder may count on. Its later grants,
				// certain ones, are followed as any other.
			case ev.Ev == evLease:
				open[k] = &tenureState{t: history.Tenure{Name: ev.Name, Client: c, Token: ev.Token, From: ev.T, Sent: ev.Sent,
					To: leaseEnd(steps, arrival(cuts[c], ev.Sent), ev.TTL)}, last: ev.T, ttl: ev.TTL}
				order = append(order, k)
			case s == nil:
			case ev.Ev == evRenew && ev.Uncertain:
				// It may have renewed the lease if it arrived before
				// the lease expired, at the latest when its error came.
				if arrival(cuts[c], ev.Sent) <= s.expiry(steps) {
					s.maybe = max(s.maybe, ev.T)
				}
			case ev.Ev == evRenew:
				// The service measured the TTL from the renewal's
				// arrival, and a renewal that arrived after the
				// lease's expiry revived it, whenever it was sent.
				at := arrival(cuts[c], ev.Sent)
				renewals = append(renewals, history.Renewal{Name: ev.Name, Client: c, Token: ev.Token,
					Sent: ev.Sent, Arrived: at, Expiry: s.expiry(steps)})
				if !s.released {
					// A renewal whose answer came after the release's
					// (one held by a fault and delivered late) ran
					// before it: the service renews no released lease.
					s.t.To = max(s.t.To, leaseEnd(steps, at, ev.TTL))
				}
				s.last, s.ttl = ev.T, ev.TTL
			case ev.Ev == evRelease && ev.Uncertain:
				// It may have ended the tenure as soon as it arrived.
				s.t.To, s.released = min(s.t.To, ev.Sent), true
			case ev.Ev == evRelease:
				// The service released a grant in force, after the
				// request was sent: it was in force until then at least,
				// and ended at the release.
				s.t.To, s.released = ev.Sent, true
			}
		}
	}
	tenures := make([]history.Tenure, 0, len(order))
	for _, k := range order {
		t := open[k].t
		for _, f := range forgot {
			if t.From < f {
				t.To = min(t.To, f)
			}
		}
		tenures = append(tenures, t)
	}
	return tenures, renewals
}

// leaseActs are the acts of kind ev (evRelease, evValue) the lock service
// answered as done (the idempotency leases' completions are releases too),
// each at the time its request was sent: one whose answer never came may
// not have been made.
func leaseActs(byClient map[int][]event, ev string) []history.Act {
	var out []history.Act
	for _, c := range slices.Sorted(maps.Keys(byClient)) {
		for _, e := range byClient[c] {
			if e.Ev == ev && !e.Uncertain && e.Sent != 0 {
				out = append(out, history.Act{Name: e.Name, Client: c, Token: e.Token, At: e.Sent})
			}
		}
	}
	return out
}

// staleReleases is check (history.StaleReleases, history.StaleValues) of
// the lock service's acts, each judged against the grants a failover that
// lost WAL (forgot) did not take back before it was sent: a grant the
// promoted server never saw supersedes nothing there.
func staleReleases(ts []history.Tenure, acts []history.Act, forgot []history.Time, base history.Time,
	check func([]history.Tenure, []history.Act, history.Time) []history.Violation) []history.Violation {
	if len(forgot) == 0 {
		return check(ts, acts, base)
	}
	var out []history.Violation
	for _, a := range acts {
		kept := slices.DeleteFunc(slices.Clone(ts), func(t history.Tenure) bool {
			return slices.ContainsFunc(forgot, func(f history.Time) bool { return t.From < f && f < a.At })
		})
		out = append(out, check(kept, []history.Act{a}, base)...)
	}
	return out
}

// ownerEvidence is what a partition member's events say, by the store's
// rules: the tenures of its membership leases (named by the member) and of
// its ownerships (named "partition/N", their Token the epoch), the renewals
// of its membership, its calls as an owner, the refusals of its writes
// as a stale owner, and its releases (At: when each was sent); ttl is the
// longest membership TTL.
type ownerEvidence struct {
	members, owners          []history.Tenure
	renewals                 []history.Renewal
	acts, refusals, releases []history.Act
	ttl                      time.Duration
}

// ownerSpans turns the partition members' events into their evidence, its
// calls excused when faulted names their operation, the wall clock's steps
// counted as leaseSpans counts them. An ownership lasts, by
// the store's rules, until the member releases the partition, claims it
// again, or its membership lease expires: no other member can claim it
// before.
func ownerSpans(byClient map[int][]event, faulted map[string]bool, steps []wallStep) ownerEvidence {
	type membership struct {
		client int
		inc    int64
	}
	type ownership struct {
		t   history.Tenure
		inc int64
	}
	var out ownerEvidence
	ms := map[membership]*tenureState{}
	var mOrder []membership
	left := map[membership]history.Time{} // by membership, when its first leave was sent
	os := map[tenureKey]*ownership{}
	var oOrder []tenureKey
	current := map[tenureKey]tenureKey{} // a client's partition → its last claim
	for _, c := range slices.Sorted(maps.Keys(byClient)) {
		for _, ev := range byClient[c] {
			switch ev.Ev {
			case evMember:
				out.ttl = max(out.ttl, ev.TTL)
				k := membership{c, ev.Token}
				to := leaseEnd(steps, ev.Sent, ev.TTL)
				if m := ms[k]; m != nil {
					out.renewals = append(out.renewals, history.Renewal{Name: ev.Name, Client: c, Token: ev.Token,
						Sent: ev.Sent, Expiry: leaseExpiry(steps, m.last, m.ttl)})
					m.t.To, m.last, m.ttl = max(m.t.To, to), ev.T, ev.TTL
					continue
				}
				ms[k] = &tenureState{t: history.Tenure{Name: ev.Name, Client: c, Token: ev.Token, From: ev.T, To: to, Sent: ev.Sent}, last: ev.T, ttl: ev.TTL}
				mOrder = append(mOrder, k)
			case evLeave:
				// A heartbeat that raced the leave may be reported after
				// it: the leave bounds the lease whatever the order.
				k := membership{c, ev.Token}
				if l, ok := left[k]; !ok || ev.Sent < l {
					left[k] = ev.Sent
				}
			case evClaim:
				part := tenureKey{client: c, name: ev.Name}
				if prev := os[current[part]]; prev != nil {
					prev.t.To = min(prev.t.To, ev.Sent) // claimed again: a new epoch
				}
				k := tenureKey{client: c, name: ev.Name, token: ev.Token}
				os[k] = &ownership{t: history.Tenure{Name: ev.Name, Client: c, Token: ev.Token, From: ev.T, To: history.Time(math.MaxInt64), Sent: ev.Sent}, inc: ev.Incarnation}
				oOrder, current[part] = append(oOrder, k), k
			case evDisown:
				if o := os[tenureKey{client: c, name: ev.Name, token: ev.Token}]; o != nil {
					o.t.To = min(o.t.To, ev.Sent)
				}
				if !ev.Uncertain { // a release whose answer never came may not have been made
					out.releases = append(out.releases, history.Act{Name: ev.Name, Client: c, Token: ev.Token, At: ev.Sent})
				}
			case evAct:
				out.acts = append(out.acts, history.Act{Name: ev.Name, Client: c, Token: ev.Token, At: ev.T, Excused: faulted[ev.Op]})
			case evRefuse:
				out.refusals = append(out.refusals, history.Act{Name: ev.Name, Client: c, Token: ev.Token, At: ev.T})
			}
		}
	}
	for _, k := range mOrder {
		if l, ok := left[k]; ok {
			ms[k].t.To = min(ms[k].t.To, l)
		}
		out.members = append(out.members, ms[k].t)
	}
	for _, k := range oOrder {
		o := os[k]
		m := ms[membership{k.client, o.inc}]
		if m == nil {
			continue // under a membership never seen granted: not judged
		}
		o.t.To = min(o.t.To, m.t.To)
		out.owners = append(out.owners, o.t)
	}
	return out
}

// checkTenures adds the lock's and the partition members' violations to
// rep, each lock, member and partition its own key of the report.
func (r *run) checkTenures(rep *history.Findings) {
	r.mon.mu.Lock()
	leases := make(map[int][]event, len(r.mon.tenures))
	for c, evs := range r.mon.tenures {
		leases[c] = slices.Clone(evs)
	}
	owned := make(map[int][]event, len(r.mon.owners))
	for c, evs := range r.mon.owners {
		owned[c] = slices.Clone(evs)
	}
	// A call whose operation the coordinator stopped, stalled or held at
	// a point began late because of the fault: partition's before-write
	// point comes after the member's check of its lease.
	faulted := map[string]bool{}
	for _, p := range r.mon.points {
		if p.ev.Ev == evPoint && p.ev.Op != "" {
			faulted[p.ev.Op] = true
		}
	}
	r.mon.mu.Unlock()
	forgot, cuts, steps := r.log.evidence()

	tenures, renewals := leaseSpans(leases, forgot, cuts, steps)
	own := ownerSpans(owned, faulted, steps)
	var vs []history.Violation
	for _, found := range [][]history.Violation{
		history.Exclusive(tenures, rep.Base), history.Revivals(renewals, rep.Base),
		// A lease released (or completed) as done frees only its own
		// tenure: none after a later grant of the name returned.
		staleReleases(tenures, leaseActs(leases, evRelease), forgot, rep.Base, history.StaleReleases),
		// A value set as done was set in its own tenure: none after a
		// later grant of the name returned.
		staleReleases(tenures, leaseActs(leases, evValue), forgot, rep.Base, history.StaleValues),
		history.Exclusive(own.members, rep.Base), history.Revivals(own.renewals, rep.Base),
		history.Exclusive(own.owners, rep.Base),
		// Tokens, epochs and incarnations only grow, failovers included:
		// no fault excuses a grant below an earlier one.
		history.Ascending(tenures, rep.Base), history.Ascending(own.members, rep.Base),
		history.Ascending(own.owners, rep.Base),
		// A member checks its lease is safe right before each call: half
		// a TTL covers the instants between, however loaded the machine.
		history.Lapses(own.owners, own.acts, history.Time(own.ttl/2), rep.Base),
		// A write refused as stale is the owner's due only once its
		// ownership may have ended: no fault excuses the store.
		history.Refused(own.owners, own.refusals, rep.Base),
		// A release the store answered as done frees only the ownership
		// it names: none after a later claim of the partition returned.
		history.StaleReleases(own.owners, own.releases, rep.Base),
	} {
		vs = append(vs, found...)
	}
	for _, v := range vs {
		rep.Add(v)
	}
	slices.SortFunc(rep.Keys, func(a, b history.KeyFindings) int { return cmp.Compare(a.Key, b.Key) })
}
