package history_test

import (
	"strings"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

func TestExclusive(t *testing.T) {
	const s = history.Time(1e9)
	tests := []struct {
		name string
		ts   []history.Tenure
		want int
	}{
		{"one after the other", []history.Tenure{
			{Name: "a", Client: 1, Token: 1, From: 0, To: s},
			{Name: "a", Client: 2, Token: 2, From: s + 1, To: 2 * s},
		}, 0},
		{"granted while the other was in force", []history.Tenure{
			{Name: "a", Client: 1, Token: 1, From: 0, To: s},
			{Name: "a", Client: 2, Token: 2, From: s / 2, To: 2 * s},
		}, 1},
		{"the same client's next grant counts too", []history.Tenure{
			{Name: "a", Client: 1, Token: 1, From: 0, To: s},
			{Name: "a", Client: 1, Token: 2, From: s / 2, To: 2 * s},
		}, 1},
		{"other names do not meet", []history.Tenure{
			{Name: "a", Client: 1, Token: 1, From: 0, To: s},
			{Name: "b", Client: 2, Token: 2, From: s / 2, To: 2 * s},
		}, 0},
		{"a span that says nothing", []history.Tenure{
			{Name: "a", Client: 1, Token: 1, From: s, To: s / 2},
			{Name: "a", Client: 2, Token: 2, From: s / 2, To: 2 * s},
		}, 0},
		{"one grant reported twice is one tenure", []history.Tenure{
			{Name: "a", Client: 1, Token: 1, From: 0, To: s},
			{Name: "a", Client: 1, Token: 1, From: s / 2, To: 2 * s},
		}, 0},
		{"each overlapping pair", []history.Tenure{
			{Name: "a", Client: 1, Token: 1, From: 0, To: 3 * s},
			{Name: "a", Client: 2, Token: 2, From: s, To: 4 * s},
			{Name: "a", Client: 3, Token: 3, From: 2 * s, To: 5 * s},
		}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs := history.Exclusive(tc.ts, 0)
			if len(vs) != tc.want {
				t.Fatalf("%d violations, want %d: %v", len(vs), tc.want, vs)
			}
			for _, v := range vs {
				if v.Anomaly != history.Overlap || v.Key != "a" || v.Text == "" {
					t.Errorf("violation %+v", v)
				}
			}
		})
	}
}

func TestAscending(t *testing.T) {
	const s = history.Time(1e9)
	tests := []struct {
		name string
		ts   []history.Tenure
		want int
	}{
		{"each grant above the last", []history.Tenure{
			{Name: "a", Client: 1, Token: 5, Sent: 1, From: s},
			{Name: "a", Client: 2, Token: 9, Sent: 2 * s, From: 3 * s},
			{Name: "a", Client: 1, Token: 12, Sent: 4 * s, From: 5 * s},
		}, 0},
		{"a grant below one that had returned", []history.Tenure{
			{Name: "a", Client: 1, Token: 9, Sent: 1, From: s},
			{Name: "a", Client: 2, Token: 7, Sent: 2 * s, From: 3 * s},
		}, 1},
		{"the same token handed out again", []history.Tenure{
			{Name: "a", Client: 1, Token: 9, Sent: 1, From: s},
			{Name: "a", Client: 2, Token: 9, Sent: 2 * s, From: 3 * s},
		}, 1},
		{"the same holder's next grant counts too", []history.Tenure{
			{Name: "a", Client: 1, Token: 9, Sent: 1, From: s},
			{Name: "a", Client: 1, Token: 8, Sent: 2 * s, From: 3 * s},
		}, 1},
		{"below the highest, not only the last", []history.Tenure{
			{Name: "a", Client: 1, Token: 9, Sent: 1, From: s},
			{Name: "a", Client: 2, Token: 12, Sent: 2 * s, From: 3 * s},
			{Name: "a", Client: 3, Token: 10, Sent: 4 * s, From: 5 * s},
		}, 1},
		{"requested before the other returned: either order", []history.Tenure{
			{Name: "a", Client: 1, Token: 9, Sent: 1, From: 3 * s},
			{Name: "a", Client: 2, Token: 7, Sent: 2 * s, From: 4 * s},
		}, 0},
		{"one grant reported twice is one grant", []history.Tenure{
			{Name: "a", Client: 1, Token: 9, Sent: 1, From: s},
			{Name: "a", Client: 1, Token: 9, Sent: 1, From: 2 * s},
			{Name: "a", Client: 1, Token: 9, Sent: 3 * s, From: 4 * s},
		}, 0},
		{"other names do not meet", []history.Tenure{
			{Name: "a", Client: 1, Token: 9, Sent: 1, From: s},
			{Name: "b", Client: 2, Token: 7, Sent: 2 * s, From: 3 * s},
		}, 0},
		{"no send time or no token: not judged", []history.Tenure{
			{Name: "a", Client: 1, Token: 9, Sent: 1, From: s},
			{Name: "a", Client: 2, Token: 7, From: 3 * s},
			{Name: "a", Client: 3, Token: -4, Sent: 4 * s, From: 5 * s},
		}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs := history.Ascending(tc.ts, 0)
			if len(vs) != tc.want {
				t.Fatalf("%d violations, want %d: %v", len(vs), tc.want, vs)
			}
			for _, v := range vs {
				if v.Anomaly != history.Regressed || v.Key != "a" || v.Text == "" {
					t.Errorf("violation %+v", v)
				}
			}
		})
	}
}

func TestRevivals(t *testing.T) {
	rs := []history.Renewal{
		{Name: "a", Client: 1, Token: 1, Sent: 10, Expiry: 20},
		{Name: "a", Client: 1, Token: 1, Sent: 20, Expiry: 20},
		{Name: "a", Client: 2, Token: 2, Sent: 21, Expiry: 20},
		{Name: "a", Client: 3, Token: 3, Sent: 10, Arrived: 20, Expiry: 20},
		{Name: "a", Client: 4, Token: 4, Sent: 10, Arrived: 21, Expiry: 20},
	}
	vs := history.Revivals(rs, 0)
	if len(vs) != 2 || vs[0].Anomaly != history.Revived || vs[1].Anomaly != history.Revived {
		t.Fatalf("violations %+v, want the renewal sent after its expiry and the one held until after it", vs)
	}
}

func TestLapses(t *testing.T) {
	ts := []history.Tenure{{Name: "p", Client: 1, Token: 7, From: 0, To: 100}}
	acts := []history.Act{
		{Name: "p", Client: 1, Token: 7, At: 50},  // in force
		{Name: "p", Client: 1, Token: 7, At: 110}, // within the slack
		{Name: "p", Client: 1, Token: 7, At: 111}, // lapsed
		{Name: "p", Client: 2, Token: 7, At: 500}, // another's tenure: not judged
		{Name: "p", Client: 1, Token: 7, At: 500, Excused: true},
	}
	vs := history.Lapses(ts, acts, 10, 0)
	if len(vs) != 1 || vs[0].Anomaly != history.Lapsed || vs[0].Key != "p" {
		t.Fatalf("violations %+v, want the one act past the slack", vs)
	}
}

func TestRefused(t *testing.T) {
	ts := []history.Tenure{{Name: "p", Client: 1, Token: 7, From: 0, To: 100}}
	refusals := []history.Act{
		{Name: "p", Client: 1, Token: 7, At: 50},  // refused while in force
		{Name: "p", Client: 1, Token: 7, At: 100}, // at its end: not certain
		{Name: "p", Client: 1, Token: 7, At: 150}, // after its end
		{Name: "p", Client: 2, Token: 7, At: 50},  // another's tenure: not judged
		{Name: "p", Client: 1, Token: 8, At: 50},  // an epoch never seen granted
	}
	vs := history.Refused(ts, refusals, 0)
	if len(vs) != 1 || vs[0].Anomaly != history.RefusedOwner || vs[0].Key != "p" || vs[0].Text == "" {
		t.Fatalf("violations %+v, want the one refusal within the tenure", vs)
	}
}

func TestStaleReleases(t *testing.T) {
	ts := []history.Tenure{
		{Name: "p", Client: 1, Token: 7, From: 0, To: 100},
		{Name: "p", Client: 2, Token: 8, From: 120, To: 300},
		{Name: "q", Client: 2, Token: 3, From: 10, To: 300},
	}
	releases := []history.Act{
		{Name: "p", Client: 1, Token: 7, At: 150}, // sent after client 2's claim returned: stale
		{Name: "p", Client: 1, Token: 7, At: 110}, // sent before it: the claim may have come after
		{Name: "p", Client: 2, Token: 8, At: 200}, // the current tenure's own release
		{Name: "q", Client: 1, Token: 2, At: 5},   // before the later grant of q
	}
	vs := history.StaleReleases(ts, releases, 0)
	if len(vs) != 1 || vs[0].Anomaly != history.StaleRelease || vs[0].Key != "p" || vs[0].Text == "" {
		t.Fatalf("violations %+v, want the one release sent after a later claim", vs)
	}
	// A value set is judged the same way, as its own anomaly.
	vs = history.StaleValues(ts, releases, 0)
	if len(vs) != 1 || vs[0].Anomaly != history.StaleValue || !strings.Contains(vs[0].Text, "value set") {
		t.Fatalf("violations %+v, want the one value set after a later claim", vs)
	}
}
