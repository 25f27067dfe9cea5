package partition_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lockfree-go/lockfree/partition"
)

// FuzzRingConfig builds rings from fuzzed member names (comma-separated),
// partition counts, replication factors and loads: NewRing never panics, and
// returns either a ring that places every partition on a member within the
// load bound, the same for any order of the names, or an error matching
// ErrInvalid. The seeds run in every go test.
func FuzzRingConfig(f *testing.F) {
	f.Add("a,b,c", 271, 20, 1.25)
	f.Add("", 0, 0, 0.0)
	f.Add("solo", 1, 1, 1.0)
	f.Add("a,a", 7, 3, 1.0)
	f.Add("a,,b", 7, 3, 1.0)
	f.Add("x\x00y,b", 7, 3, 1.0)
	f.Add("\xff\xfe,b", 7, 3, 1.0)
	f.Add("a,b", 65536, 1, 1.0)
	f.Add("a,b", 65537, 1, 1.0)
	f.Add("a,b", -1, 1, 1.0)
	f.Add("a,b", 10, 1025, 1.0)
	f.Add("a,b", 10, -5, 1.0)
	f.Add("a,b", 10, 5, 0.999)
	f.Add("a,b", 10, 5, math.NaN())
	f.Add("a,b", 10, 5, math.Inf(1))
	f.Add("a,b,c,d,e,f,g", 5, 2, 1e308)
	f.Add("m0,m1,m2,m3,m4,m5,m6,m7,m8,m9", 3, 1, 1.0)
	f.Add(strings.Repeat("n", 256)+",b", 7, 3, 1.0)
	f.Fuzz(func(t *testing.T, names string, partitions, replication int, load float64) {
		var members []string
		if names != "" {
			members = strings.Split(names, ",")
		}
		if replication >= 1 && replication <= partition.MaxReplicationFactor && len(members)*replication > 1<<13 {
			t.Skip("too slow to fuzz: the ring library is quadratic in members × replication")
		}
		cfg := partition.RingConfig{Partitions: partitions, ReplicationFactor: replication, Load: load}
		r, err := partition.NewRing(members, &cfg)
		if err != nil {
			if !errors.Is(err, partition.ErrInvalid) || r != nil {
				t.Fatalf("NewRing(%q, %+v) = %v, %v; want only an error matching ErrInvalid", members, cfg, r, err)
			}
			return
		}
		checkRing(t, r, members, cfg)
		reversed := slices.Clone(members)
		slices.Reverse(reversed)
		again, err := partition.NewRing(reversed, &cfg)
		if err != nil {
			t.Fatalf("the same members in another order: %v", err)
		}
		if again.ID() != r.ID() {
			t.Fatalf("the same members in another order: ID %q, was %q", again.ID(), r.ID())
		}
		if moved := partition.Moved(r, again); len(moved) != 0 {
			t.Fatalf("the same members in another order move partitions %v", moved)
		}
	})
}

// checkRing checks that r places every partition on one of members, within
// the bounded load, and routes keys into range.
func checkRing(t *testing.T, r *partition.Ring, members []string, cfg partition.RingConfig) {
	t.Helper()
	want := slices.Clone(members)
	slices.Sort(want)
	if !slices.Equal(r.Members(), want) {
		t.Fatalf("Members = %q, want %q", r.Members(), want)
	}
	if cfg.Partitions != 0 && r.Partitions() != cfg.Partitions {
		t.Fatalf("Partitions = %d, want %d", r.Partitions(), cfg.Partitions)
	}
	for p := range r.Partitions() {
		o := r.Owner(p)
		if (len(members) == 0) != (o == "") || (o != "" && !slices.Contains(members, o)) {
			t.Fatalf("partition %d owned by %q among %q", p, o, members)
		}
	}
	if len(members) > 0 {
		l := cfg.Load
		if l == 0 {
			l = 1.25
		}
		bound := math.Ceil(float64(r.Partitions()) / float64(len(members)) * l)
		total := 0
		for m, n := range r.Load() {
			if float64(n) > bound {
				t.Fatalf("%q owns %d partitions, above the bound %v", m, n, bound)
			}
			total += n
		}
		if total != r.Partitions() {
			t.Fatalf("loads sum to %d of %d partitions", total, r.Partitions())
		}
	}
	for _, key := range []string{"", "k", members0(members)} {
		if p := r.Partition(key); p < 0 || p >= r.Partitions() {
			t.Fatalf("Partition(%q) = %d outside [0, %d)", key, p, r.Partitions())
		}
	}
}

func members0(ms []string) string {
	if len(ms) == 0 {
		return "none"
	}
	return ms[0]
}
