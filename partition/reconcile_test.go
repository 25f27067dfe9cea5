package partition

import (
	"fmt"
	"slices"
	"testing"
)

// reconcile decides, from the ownership rows and the ring alone, what a
// member aborts, hands off and claims.
func TestReconcile(t *testing.T) {
	// Four partitions: the ring places 0 and 2 on "a", 1 and 3 on "b".
	ring := &Ring{cfg: RingConfig{Partitions: 4}, members: []string{"a", "b"}, owners: []string{"a", "b", "a", "b"}}
	empty := &Ring{cfg: RingConfig{Partitions: 4}}
	rows := func(owners ...string) []Epoch {
		out := make([]Epoch, len(owners))
		for p, o := range owners {
			out[p] = Epoch{Partition: p, Owner: o, Token: 5}
		}
		return out
	}
	ep := func(p int, owner string, token int64) Epoch { return Epoch{Partition: p, Owner: owner, Token: token} }
	tests := []struct {
		name    string
		ring    *Ring
		owners  []Epoch
		alive   []string
		running []Epoch
		handing []int
		want    string // superseded, handoff, claim, moving
		orphans []int  // rows of "a" to release
	}{
		{"fresh member claims its free partitions", ring, rows("", "", "", ""), []string{"a", "b"}, nil, nil,
			"[] [] [0 2] true", nil},
		{"a live owner keeps its partition until it releases", ring, rows("b", "", "b", ""), []string{"a", "b"}, nil, nil,
			"[] [] [] true", nil},
		{"a dead owner's partition is claimed", ring, rows("c", "", "b", ""), []string{"a", "b"}, nil, nil,
			"[] [] [0] true", nil},
		{"its own row (a restart) is claimed again", ring, rows("a", "", "a", ""), []string{"a"}, nil, nil,
			"[] [] [0 2] true", nil},
		{"settled: nothing to do", ring, rows("a", "b", "a", "b"), []string{"a", "b"},
			[]Epoch{ep(0, "a", 5), ep(2, "a", 5)}, nil, "[] [] [] false", nil},
		{"a newer epoch supersedes the executor", ring, rows("a", "b", "c", "b"), []string{"a", "b", "c"},
			[]Epoch{ep(0, "a", 5), ep(2, "a", 4)}, nil, "[2] [] [] true", nil},
		{"a superseded partition of a dead owner is claimed back", ring, rows("a", "b", "c", "b"), []string{"a", "b"},
			[]Epoch{ep(0, "a", 5), ep(2, "a", 4)}, nil, "[2] [] [2] true", nil},
		{"a released row supersedes the executor", ring, rows("a", "b", "", "b"), []string{"a", "b"},
			[]Epoch{ep(0, "a", 5), ep(2, "a", 5)}, nil, "[2] [] [2] true", nil},
		{"the ring moved a partition away: hand off", ring, rows("a", "a", "a", "b"), []string{"a", "b"},
			[]Epoch{ep(0, "a", 5), ep(1, "a", 5), ep(2, "a", 5)}, nil, "[] [1] [] true", nil},
		{"a partition being handed off is not claimed again", ring, rows("a", "b", "a", "b"), []string{"a", "b"},
			[]Epoch{ep(2, "a", 5)}, []int{0}, "[] [] [] true", nil},
		{"off the ring (leaving): hand everything off", empty, rows("a", "b", "a", "b"), []string{"a", "b"},
			[]Epoch{ep(0, "a", 5), ep(2, "a", 5)}, nil, "[] [0 2] [] true", nil},
		{"handoff of a superseded partition is an abort", empty, rows("a", "b", "c", "b"), []string{"a", "b", "c"},
			[]Epoch{ep(0, "a", 5), ep(2, "a", 5)}, nil, "[2] [0] [] true", nil},
		{"its row placed elsewhere that it does not run (a failed release): release it", ring, rows("a", "a", "a", "a"),
			[]string{"a", "b"}, []Epoch{ep(0, "a", 5), ep(2, "a", 5)}, nil, "[] [] [] true", []int{1, 3}},
		{"an orphan being released is not released again", ring, rows("a", "a", "a", "b"), []string{"a", "b"},
			[]Epoch{ep(0, "a", 5), ep(2, "a", 5)}, []int{1}, "[] [] [] true", nil},
		{"its row with a newer epoch than its executor, placed elsewhere: abort and release", ring,
			[]Epoch{ep(0, "a", 5), ep(1, "a", 6), ep(2, "a", 5), ep(3, "b", 5)}, []string{"a", "b"},
			[]Epoch{ep(0, "a", 5), ep(1, "a", 5), ep(2, "a", 5)}, nil, "[1] [] [] true", []int{1}},
		{"off the ring (leaving): hand off what runs, release the rest", empty, rows("a", "a", "b", "b"), []string{"a", "b"},
			[]Epoch{ep(0, "a", 5)}, nil, "[] [0] [] true", []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			alive := map[string]bool{}
			for _, n := range tt.alive {
				alive[n] = true
			}
			running := map[int]Epoch{}
			for _, e := range tt.running {
				running[e.Partition] = e
			}
			handing := map[int]bool{}
			for _, p := range tt.handing {
				handing[p] = true
			}
			pl := reconcile("a", tt.owners, tt.ring, alive, running, handing)
			got := fmt.Sprint(pl.superseded, pl.handoff, pl.claim, pl.moving)
			if got != tt.want {
				t.Fatalf("reconcile = %s, want %s", got, tt.want)
			}
			var orphans []int
			for _, e := range pl.orphans {
				if e != tt.owners[e.Partition] {
					t.Fatalf("orphan %+v is not the row %+v", e, tt.owners[e.Partition])
				}
				orphans = append(orphans, e.Partition)
			}
			if !slices.Equal(orphans, tt.orphans) {
				t.Fatalf("orphans = %v, want %v", orphans, tt.orphans)
			}
		})
	}
}

// fleet places only the live members of this ring that are not leaving,
// keeps a leaving self until selfOut, and knows every live member's address.
func TestFleet(t *testing.T) {
	live := []MemberInfo{
		{Name: "a", Addr: "a:1", Ring: "r"},
		{Name: "b", Addr: "b:1", Ring: "r", Leaving: true},
		{Name: "c", Addr: "c:1", Ring: "other"},
		{Name: "d", Addr: "d:1", Ring: "r"},
	}
	for _, tt := range []struct {
		self    string
		selfOut bool
		want    string
	}{
		{"a", false, "[a d]"},
		{"a", true, "[d]"},
		{"b", false, "[a b d]"}, // a leaving self stays placed for its grace period
		{"b", true, "[a d]"},
	} {
		names, alive, addrs := fleet(live, tt.self, "r", tt.selfOut)
		if got := fmt.Sprint(names); got != tt.want {
			t.Errorf("fleet(self %s, out %v) = %s, want %s", tt.self, tt.selfOut, got, tt.want)
		}
		if len(alive) != 4 || addrs["c"] != "c:1" {
			t.Errorf("alive %v, addrs %v: want every live member", alive, addrs)
		}
	}
}
