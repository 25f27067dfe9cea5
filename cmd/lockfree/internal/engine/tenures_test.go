package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

const ms = history.Time(time.Millisecond)

// A grant's span runs from its return to its release's send, or to its last
// grant's or renewal's send plus the TTL less the margin; a failover that
// lost the lock service's WAL ends the spans granted before it.
func TestLeaseSpans(t *testing.T) {
	ttl := 250 * time.Millisecond
	m := tenureMargin(ttl)
	evs := map[int][]event{
		1: {
			{Ev: evLease, Name: "a", Token: 1, TTL: ttl, Sent: 1 * ms, T: 5 * ms},
			{Ev: evRenew, Name: "a", Token: 1, TTL: ttl, Sent: 100 * ms, T: 110 * ms},
			{Ev: evRelease, Name: "a", Token: 1, Sent: 200 * ms, T: 210 * ms},
			{Ev: evLease, Name: "a", Token: 3, TTL: ttl, Sent: 300 * ms, T: 305 * ms},
			// Sent after the grant of 3 had expired: revived.
			{Ev: evRenew, Name: "a", Token: 3, TTL: ttl, Sent: 700 * ms, T: 705 * ms},
		},
		2: {
			{Ev: evLease, Name: "a", Token: 2, TTL: ttl, Sent: 210 * ms, T: 220 * ms},
			{Ev: evLease, Name: "b", Token: -1, TTL: ttl, T: 1}, // no send time: not checked
		},
	}
	tenures, renewals := leaseSpans(evs, []history.Time{1000 * ms}, nil, nil)
	want := []history.Tenure{
		{Name: "a", Client: 1, Token: 1, From: 5 * ms, To: 200 * ms, Sent: 1 * ms},
		{Name: "a", Client: 1, Token: 3, From: 305 * ms, To: 700*ms + history.Time(ttl) - m, Sent: 300 * ms},
		{Name: "a", Client: 2, Token: 2, From: 220 * ms, To: 210*ms + history.Time(ttl) - m, Sent: 210 * ms},
	}
	if len(tenures) != len(want) {
		t.Fatalf("tenures %+v, want %+v", tenures, want)
	}
	for i := range want {
		if tenures[i] != want[i] {
			t.Errorf("tenure %d: %+v, want %+v", i, tenures[i], want[i])
		}
	}
	if vs := history.Revivals(renewals, 0); len(vs) != 1 {
		t.Errorf("revivals %+v, want the renewal of token 3", vs)
	}
	// 1 was released before 2 was granted; 3 was granted while 2's grant
	// was in force.
	if vs := history.Exclusive(tenures, 0); len(vs) != 1 {
		t.Errorf("overlaps %+v, want 3 granted during 2", vs)
	}
	if vs := history.Ascending(tenures, 0); len(vs) != 0 {
		t.Errorf("tokens went back: %+v", vs)
	}
	// A grant of 2 again, sent after 3's grant had returned: a promoted
	// standby that lost the WAL of 3 hands out what it never saw.
	again := map[int][]event{1: evs[1], 2: append(slices.Clone(evs[2]),
		event{Ev: evLease, Name: "a", Token: 2, TTL: ttl, Sent: 900 * ms, T: 905 * ms})}
	regrants, _ := leaseSpans(again, nil, nil, nil)
	if vs := history.Ascending(regrants, 0); len(vs) != 1 || vs[0].Anomaly != history.Regressed {
		t.Errorf("tokens went back: %+v, want token 2 granted again after 3", vs)
	}

	capped, _ := leaseSpans(evs, []history.Time{300 * ms}, nil, nil)
	if capped[2].To != 300*ms || capped[1].To != want[1].To {
		t.Errorf("spans with a failover at 300 ms: %+v", capped)
	}

	// A renewal of 1 sent at 100 ms, while a cut held the worker's traffic
	// until 400 ms, reached the service after 1's grant had expired.
	held, renewed := leaseSpans(evs, nil, map[int][]cut{1: {{from: 90 * ms, to: 400 * ms}}}, nil)
	if vs := history.Revivals(renewed, 0); len(vs) != 2 {
		t.Errorf("revivals with a cut %+v, want the held renewal of token 1 and the renewal of token 3", vs)
	}
	if held[0].To != 200*ms {
		t.Errorf("the release still ends the span: %+v", held[0])
	}

	// A renewal held by a cut and answered after the release's answer ran
	// before the release: the release still ends the span.
	late := map[int][]event{1: {
		{Ev: evLease, Name: "a", Token: 1, TTL: ttl, Sent: 1 * ms, T: 5 * ms},
		{Ev: evRelease, Name: "a", Token: 1, Sent: 120 * ms, T: 410 * ms},
		{Ev: evRenew, Name: "a", Token: 1, TTL: ttl, Sent: 100 * ms, T: 420 * ms},
	}}
	spans, _ := leaseSpans(late, nil, map[int][]cut{1: {{from: 90 * ms, to: 400 * ms}}}, nil)
	if spans[0].To != 120*ms {
		t.Errorf("a late renewal outlasted the release: %+v", spans[0])
	}
}

// A step of the wall clock (the lock service's clock) excuses the service
// only: one forward ends the leases it falls in early, one backward lets a
// renewal come later; a step outside a lease, or the other way, changes
// nothing.
func TestLeaseSpansWallSteps(t *testing.T) {
	ttl := 250 * time.Millisecond
	evs := map[int][]event{
		1: {
			{Ev: evLease, Name: "a", Token: 3, TTL: ttl, Sent: 300 * ms, T: 305 * ms},
			{Ev: evRenew, Name: "a", Token: 3, TTL: ttl, Sent: 700 * ms, T: 705 * ms},
		},
		2: {{Ev: evLease, Name: "a", Token: 2, TTL: ttl, Sent: 210 * ms, T: 220 * ms}},
	}
	for _, c := range []struct {
		name               string
		steps              []wallStep
		overlaps, revivals int
	}{
		{"none", nil, 1, 1},
		{"forward in 2's lease", []wallStep{{at: 230 * ms, by: 200 * time.Millisecond}}, 0, 1},
		{"forward before 2's lease", []wallStep{{at: 200 * ms, by: 200 * time.Millisecond}}, 1, 1},
		{"backward in 3's lease", []wallStep{{at: 400 * ms, by: -500 * time.Millisecond}}, 1, 0},
		{"backward in 2's lease", []wallStep{{at: 230 * ms, by: -200 * time.Millisecond}}, 1, 1},
		{"forward in 3's lease", []wallStep{{at: 450 * ms, by: 500 * time.Millisecond}}, 1, 1},
	} {
		tenures, renewals := leaseSpans(evs, nil, nil, c.steps)
		if vs := history.Exclusive(tenures, 0); len(vs) != c.overlaps {
			t.Errorf("%s: overlaps %+v, want %d", c.name, vs, c.overlaps)
		}
		if vs := history.Revivals(renewals, 0); len(vs) != c.revivals {
			t.Errorf("%s: revivals %+v, want %d", c.name, vs, c.revivals)
		}
	}
}

// An ownership lasts until its member releases the partition, claims it
// anew, or its membership lease ends by the store's rules; a call under it
// is judged unless a fault held its operation.
func TestOwnerSpans(t *testing.T) {
	ttl := time.Second
	m := tenureMargin(ttl)
	evs := map[int][]event{
		1: {
			{Ev: evMember, Name: "worker-1", Token: 10, TTL: ttl, Sent: 0, T: 5 * ms},
			{Ev: evClaim, Name: "partition/0", Token: 100, Incarnation: 10, Sent: 10 * ms, T: 15 * ms},
			{Ev: evClaim, Name: "partition/1", Token: 200, Incarnation: 10, Sent: 10 * ms, T: 15 * ms},
			{Ev: evMember, Name: "worker-1", Token: 10, TTL: ttl, Sent: 100 * ms, T: 105 * ms},
			{Ev: evDisown, Name: "partition/0", Token: 100, Sent: 300 * ms, T: 305 * ms},
			{Ev: evClaim, Name: "partition/1", Token: 201, Incarnation: 10, Sent: 400 * ms, T: 405 * ms},
			{Ev: evAct, Name: "partition/1", Token: 201, T: 3000 * ms, Op: "1/7"},
			{Ev: evAct, Name: "partition/1", Token: 201, T: 3000 * ms, Op: "1/8"},
			{Ev: evRefuse, Name: "partition/0", Token: 100, T: 200 * ms, Op: "1/5"},
			{Ev: evRefuse, Name: "partition/1", Token: 200, T: 500 * ms, Op: "1/6"},
		},
	}
	own := ownerSpans(evs, map[string]bool{"1/7": true}, nil)
	members, owners, acts, gotTTL := own.members, own.owners, own.acts, own.ttl
	end := 100*ms + history.Time(ttl) - m
	if gotTTL != ttl || len(members) != 1 || members[0].To != end {
		t.Fatalf("members %+v (TTL %v)", members, gotTTL)
	}
	want := []history.Tenure{
		{Name: "partition/0", Client: 1, Token: 100, From: 15 * ms, To: 300 * ms, Sent: 10 * ms},
		{Name: "partition/1", Client: 1, Token: 200, From: 15 * ms, To: 400 * ms, Sent: 10 * ms},
		{Name: "partition/1", Client: 1, Token: 201, From: 405 * ms, To: end, Sent: 400 * ms},
	}
	if len(owners) != len(want) {
		t.Fatalf("owners %+v, want %+v", owners, want)
	}
	for i := range want {
		if owners[i] != want[i] {
			t.Errorf("owner %d: %+v, want %+v", i, owners[i], want[i])
		}
	}
	if vs := history.Lapses(owners, acts, history.Time(ttl/2), 0); len(vs) != 1 {
		t.Errorf("lapses %+v, want the one call whose operation no fault held", vs)
	}
	if vs := history.Refused(owners, own.refusals, 0); len(vs) != 1 || vs[0].Key != "partition/0" {
		t.Errorf("refusals %+v, want the one that came back while its ownership was in force", vs)
	}
	if len(own.releases) != 1 || own.releases[0] != (history.Act{Name: "partition/0", Client: 1, Token: 100, At: 300 * ms}) {
		t.Errorf("releases %+v, want the disown of partition/0 at its send time", own.releases)
	}
	if vs := history.StaleReleases(owners, own.releases, 0); len(vs) != 0 {
		t.Errorf("stale releases %+v, want none: no later claim of partition/0", vs)
	}
	if vs := history.Ascending(owners, 0); len(vs) != 0 {
		t.Errorf("epochs went back: %+v (the same member's claim of partition/1 again is 201, above 200)", vs)
	}
}

// A crashed member's replacement (the crash fault) joins under the same name
// from a lane of its own: a Join that returned while the crashed member's
// lease was certainly in force is two leases of one name at once, and one
// that returned after it lapsed is none.
func TestReplacementJoin(t *testing.T) {
	ttl := time.Second
	crashed := []event{
		{Ev: evMember, Name: "worker-3", Token: 10, TTL: ttl, Sent: 0, T: 5 * ms},
		{Ev: evMember, Name: "worker-3", Token: 10, TTL: ttl, Sent: 100 * ms, T: 105 * ms},
	}
	lapsed := 100*ms + history.Time(ttl) // the store's expiry: after the check's end of it
	for _, tc := range []struct {
		name   string
		joined history.Time // when the replacement's Join returned
		want   int
	}{
		{"at once", 300 * ms, 1},
		{"after the lapse", lapsed + 5*ms, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := map[int][]event{
				3:  crashed,
				11: {{Ev: evMember, Name: "worker-3", Token: 11, TTL: ttl, Sent: tc.joined - 5*ms, T: tc.joined}},
			}
			own := ownerSpans(evs, nil, nil)
			if vs := history.Exclusive(own.members, 0); len(vs) != tc.want {
				t.Errorf("violations %+v, want %d", vs, tc.want)
			}
		})
	}
}

// A release whose answer never came (a member paused past the request's
// deadline in a handoff) may have freed the partition: its ownership is no
// longer certainly in force from the request on, so another member's claim
// right after is no overlap — without the evidence it read as one, 76 in a
// loaded run of TestFaults/accounts/handoff-pause. It is no release the
// store is known to have made, so it cannot be a stale one either.
func TestUncertainRelease(t *testing.T) {
	ttl := time.Second
	evs := func(disown ...event) map[int][]event {
		return map[int][]event{
			1: append([]event{
				{Ev: evMember, Name: "worker-1", Token: 10, TTL: ttl, Sent: 0, T: 5 * ms},
				{Ev: evClaim, Name: "partition/2", Token: 300, Incarnation: 10, Sent: 10 * ms, T: 15 * ms},
			}, disown...),
			2: {
				{Ev: evMember, Name: "worker-2", Token: 20, TTL: ttl, Sent: 0, T: 5 * ms},
				{Ev: evClaim, Name: "partition/2", Token: 301, Incarnation: 20, Sent: 650 * ms, T: 700 * ms},
			},
		}
	}
	if vs := history.Exclusive(ownerSpans(evs(), nil, nil).owners, 0); len(vs) != 1 {
		t.Errorf("without evidence of the release: %+v, want one overlap", vs)
	}
	own := ownerSpans(evs(event{Ev: evDisown, Name: "partition/2", Token: 300, Sent: 600 * ms, T: 1500 * ms, Uncertain: true}), nil, nil)
	if vs := history.Exclusive(own.owners, 0); len(vs) != 0 {
		t.Errorf("after an uncertain release: %+v, want no overlap", vs)
	}
	if len(own.releases) != 0 || own.owners[0].To != 600*ms {
		t.Errorf("releases %+v, first ownership %+v: want none, and the ownership ending when the release was sent", own.releases, own.owners[0])
	}
}

// A heartbeat that raced its member's leave (both sent at once) may be
// reported after the leave: it extends the lease no further than the leave,
// and another member's claim of a partition the leaver owned, after the
// leave, is no overlap — without the bound it read as one, 13 in a loaded
// run of TestFaults/accounts/handoff-pause.
func TestLeaveBoundsLateHeartbeat(t *testing.T) {
	ttl := time.Second
	evs := map[int][]event{
		2: {
			{Ev: evMember, Name: "worker-2", Token: 10, TTL: ttl, Sent: 0, T: 5 * ms},
			{Ev: evClaim, Name: "partition/5", Token: 300, Incarnation: 10, Sent: 10 * ms, T: 15 * ms},
			{Ev: evLeave, Name: "worker-2", Token: 10, Sent: 400 * ms, T: 430 * ms},
			{Ev: evMember, Name: "worker-2", Token: 10, TTL: ttl, Sent: 400 * ms, T: 430 * ms},
		},
		4: {
			{Ev: evMember, Name: "worker-4", Token: 20, TTL: ttl, Sent: 0, T: 5 * ms},
			{Ev: evClaim, Name: "partition/5", Token: 301, Incarnation: 20, Sent: 445 * ms, T: 470 * ms},
		},
	}
	own := ownerSpans(evs, nil, nil)
	if vs := history.Exclusive(own.owners, 0); len(vs) != 0 {
		t.Errorf("a claim after the owner's leave: %+v, want no overlap", vs)
	}
	if own.members[0].To != 400*ms {
		t.Errorf("the leaver's lease ends at %v, want the leave's send time", own.members[0].To)
	}
}

// A grant, renewal or release whose answer never came (lost-reply loses
// it; the service may have acted on it) counts only for what is certain.
// Each case marks one event, and counts the violations (tenures, revivals,
// tokens) with the event left out (nothing reported, as before the
// evidence had it), answered (certain), and unanswered (uncertain): where
// those differ, the check can fail for the reason the case names.
func TestUncertainLeaseEvents(t *testing.T) {
	ttl := 250 * time.Millisecond
	m := tenureMargin(ttl)
	ev := func(kind string, token int64, sent history.Time) event {
		return event{Ev: kind, Name: "a", Token: token, TTL: ttl, Sent: sent, T: sent + 5*ms}
	}
	for _, tc := range []struct {
		name string
		evs  func(marked []event) map[int][]event
		// marked is the event the case is about.
		marked event
		// the violations without, with a certain, with an uncertain marked
		without, certain, uncertain int
	}{{
		// Client 1's grant of token 1 may have been made: client 2's
		// grant 10 ms later is no overlap, and client 1's certain grant
		// of 3, after 2's lease, is followed as any other.
		name: "grant", marked: ev(evLease, 1, 1*ms), without: 0, certain: 1, uncertain: 0,
		evs: func(marked []event) map[int][]event {
			return map[int][]event{1: append(marked, ev(evLease, 3, 400*ms)), 2: {ev(evLease, 2, 10*ms)}}
		},
	}, {
		// The same holder's certain grant of the same tenure after an
		// uncertain one: one tenure, no token that went back.
		name: "grant again", marked: ev(evLease, 1, 1*ms), without: 0, certain: 0, uncertain: 0,
		evs: func(marked []event) map[int][]event {
			return map[int][]event{1: append(marked, ev(evLease, 1, 20*ms)), 2: {ev(evLease, 2, 400*ms)}}
		},
	}, {
		// A renewal that may have been made extends no certain span:
		// client 2's grant after the lease's first end is no overlap.
		name: "renewal extends nothing", marked: ev(evRenew, 1, 100*ms), without: 0, certain: 1, uncertain: 0,
		evs: func(marked []event) map[int][]event {
			return map[int][]event{1: append([]event{ev(evLease, 1, 1*ms)}, marked...), 2: {ev(evLease, 2, 250*ms-m)}}
		},
	}, {
		// A renewal sent after the lease expired, whose answer never
		// came, is judged as no revival.
		name: "renewal revives nothing", marked: ev(evRenew, 1, 400*ms), without: 0, certain: 1, uncertain: 0,
		evs: func(marked []event) map[int][]event {
			return map[int][]event{1: append([]event{ev(evLease, 1, 1*ms)}, marked...)}
		},
	}, {
		// The keepalive's next renewal, after the grant's expiry: the
		// unanswered one (answered at 105 ms, on time) may have kept the
		// lease in force.
		name: "renewal after an unanswered one", marked: ev(evRenew, 1, 100*ms), without: 1, certain: 0, uncertain: 0,
		evs: func(marked []event) map[int][]event {
			return map[int][]event{1: append(append([]event{ev(evLease, 1, 1*ms)}, marked...), ev(evRenew, 1, 330*ms))}
		},
	}, {
		// An unanswered renewal sent after the expiry renewed nothing:
		// the next renewal is a revival.
		name: "renewal after a late unanswered one", marked: ev(evRenew, 1, 300*ms), without: 1, certain: 1, uncertain: 1,
		evs: func(marked []event) map[int][]event {
			return map[int][]event{1: append(append([]event{ev(evLease, 1, 1*ms)}, marked...), ev(evRenew, 1, 330*ms))}
		},
	}, {
		// A release whose answer never came may have freed the lock:
		// client 2's grant right after it is no overlap.
		name: "release", marked: ev(evRelease, 1, 100*ms), without: 1, certain: 0, uncertain: 0,
		evs: func(marked []event) map[int][]event {
			return map[int][]event{1: append([]event{ev(evLease, 1, 1*ms)}, marked...), 2: {ev(evLease, 2, 120*ms)}}
		},
	}, {
		// One sent after the lease's certain end does not stretch the
		// tenure to its send, as an answered one does.
		name: "late release", marked: ev(evRelease, 1, 400*ms), without: 0, certain: 1, uncertain: 0,
		evs: func(marked []event) map[int][]event {
			return map[int][]event{1: append([]event{ev(evLease, 1, 1*ms)}, marked...), 2: {ev(evLease, 2, 300*ms)}}
		},
	}, {
		// The tenure is certainly in force until the release was sent:
		// client 2's grant before that is an overlap whatever the answer.
		name: "grant before the release", marked: ev(evRelease, 1, 100*ms), without: 1, certain: 1, uncertain: 1,
		evs: func(marked []event) map[int][]event {
			return map[int][]event{1: append([]event{ev(evLease, 1, 1*ms)}, marked...), 2: {ev(evLease, 2, 50*ms)}}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			unanswered := tc.marked
			unanswered.Uncertain = true
			for _, c := range []struct {
				what   string
				marked []event
				want   int
			}{
				{"without it", nil, tc.without},
				{"answered", []event{tc.marked}, tc.certain},
				{"unanswered", []event{unanswered}, tc.uncertain},
			} {
				tenures, renewals := leaseSpans(tc.evs(c.marked), nil, nil, nil)
				var vs []history.Violation
				vs = append(vs, history.Exclusive(tenures, 0)...)
				vs = append(vs, history.Revivals(renewals, 0)...)
				vs = append(vs, history.Ascending(tenures, 0)...)
				if len(vs) != c.want {
					t.Errorf("%s: violations %+v, want %d (tenures %+v)", c.what, vs, c.want, tenures)
				}
			}
		})
	}
}

// A lease released (or an idempotency attempt completed) as done after a
// later grant of its name returned freed another holder's grant: a stale
// release. One sent before that grant returned, one whose answer never
// came, and one without a send time (a Redis lock's) are not judged, nor
// against a grant a failover forgot before the release.
func TestLeaseStaleRelease(t *testing.T) {
	ttl := time.Second
	evs := map[int][]event{
		1: {
			{Ev: evLease, Name: "a", Token: 1, TTL: ttl, Sent: 1 * ms, T: 5 * ms},
			{Ev: evRelease, Name: "a", Token: 1, Sent: 1300 * ms, T: 1310 * ms}, // stale
			{Ev: evLease, Name: "b", Token: 1, TTL: ttl, Sent: 1 * ms, T: 5 * ms},
			{Ev: evRelease, Name: "b", Token: 1, Sent: 1300 * ms, T: 1310 * ms, Uncertain: true},
			{Ev: evLease, Name: "c", Token: 1, TTL: ttl, Sent: 1 * ms, T: 5 * ms},
			{Ev: evRelease, Name: "c", Token: 1, Sent: 1100 * ms, T: 1310 * ms}, // sent before 2 returned
			{Ev: evRelease, Name: "d", Token: 1, T: 1310 * ms},
		},
		2: {
			{Ev: evLease, Name: "a", Token: 2, TTL: ttl, Sent: 1100 * ms, T: 1200 * ms},
			{Ev: evLease, Name: "b", Token: 2, TTL: ttl, Sent: 1100 * ms, T: 1200 * ms},
			{Ev: evLease, Name: "c", Token: 2, TTL: ttl, Sent: 1100 * ms, T: 1200 * ms},
			{Ev: evLease, Name: "d", Token: 2, TTL: ttl, Sent: 1100 * ms, T: 1200 * ms},
		},
	}
	tenures, _ := leaseSpans(evs, nil, nil, nil)
	vs := staleReleases(tenures, leaseActs(evs, evRelease), nil, 0, history.StaleReleases)
	if len(vs) != 1 || vs[0].Key != "a" || vs[0].Anomaly != history.StaleRelease {
		t.Errorf("stale releases %+v, want client 1's release of a", vs)
	}
	// A failover that lost the WAL of 2's grant, between the grant and
	// the release: the promoted server released 1, its current tenure.
	if vs := staleReleases(tenures, leaseActs(evs, evRelease), []history.Time{1250 * ms}, 0, history.StaleReleases); len(vs) != 0 {
		t.Errorf("after a failover that forgot the later grant: %+v, want none", vs)
	}
}
