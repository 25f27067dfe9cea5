package partition_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/lockfree-go/lockfree/partition"
)

// The placement is part of the protocol: every member must compute the same
// owners. This golden test fails if the library, the hasher or the way the
// ring is built changes placement; bump LibraryVersion (and tell users that
// a fleet must restart together) when it does.
func TestRingPlacementIsStable(t *testing.T) {
	t.Parallel()
	r, err := partition.NewRing([]string{"member-2", "member-0", "member-1"}, &partition.RingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var first []string
	for p := range 12 {
		first = append(first, r.Owner(p))
	}
	got := fmt.Sprintf("%v %v %d %d", strings.Join(first, ","), r.Load(), r.Partition("account-42"), r.Partition(""))
	const want = "member-0,member-0,member-2,member-2,member-1,member-2,member-2,member-1,member-0,member-1,member-2,member-2 map[member-0:76 member-1:82 member-2:113] 73 244"
	if got != want {
		t.Fatalf("placement changed:\n got %s\nwant %s", got, want)
	}
	if r.ID() != "consistent@v1.0.0 fnv64a partitions=271 replication=20 load=1.25" {
		t.Fatalf("ID = %q", r.ID())
	}
}

// LibraryVersion must name the version the module requires.
func TestLibraryVersionMatchesGoMod(t *testing.T) {
	t.Parallel()
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := "github.com/buraksezer/consistent " + partition.LibraryVersion
	if !strings.Contains(string(mod), want) {
		t.Fatalf("go.mod does not require %q", want)
	}
}

func TestRingIsAFunctionOfTheMemberSet(t *testing.T) {
	t.Parallel()
	a, _ := partition.NewRing([]string{"x", "y", "z", "w"}, &partition.RingConfig{Partitions: 97})
	b, _ := partition.NewRing([]string{"w", "z", "y", "x"}, &partition.RingConfig{Partitions: 97})
	if moved := partition.Moved(a, b); len(moved) != 0 {
		t.Fatalf("member order moved partitions %v", moved)
	}
	for p := range 97 {
		if a.Owner(p) == "" {
			t.Fatalf("partition %d has no owner", p)
		}
	}
	load := a.Load()
	for m, n := range load {
		if limit := int(math.Ceil(97.0 / 4 * 1.25)); n > limit {
			t.Errorf("%s owns %d partitions, above the bound %d", m, n, limit)
		}
	}
	empty, err := partition.NewRing(nil, &partition.RingConfig{})
	if err != nil || empty.Owner(0) != "" || len(empty.Members()) != 0 {
		t.Fatalf("empty ring: %v", err)
	}
	if a.Owner(-1) != "" || a.Owner(97) != "" {
		t.Fatal("out-of-range partitions have owners")
	}
}

// Adding a member moves about 1/n of the partitions, removing one moves its
// share; the counts are reported for the docs.
func TestRingMovesFewPartitions(t *testing.T) {
	t.Parallel()
	three, _ := partition.NewRing([]string{"member-0", "member-1", "member-2"}, &partition.RingConfig{})
	four, _ := partition.NewRing([]string{"member-0", "member-1", "member-2", "member-3"}, &partition.RingConfig{})
	two, _ := partition.NewRing([]string{"member-0", "member-2"}, &partition.RingConfig{})
	join, leave := len(partition.Moved(three, four)), len(partition.Moved(three, two))
	t.Logf("271 partitions: join 3→4 moves %d (ideal %d), leave 3→2 moves %d (ideal %d)", join, 271/4, leave, three.Load()["member-1"])
	if join > 271/2 || leave > 271/2 {
		t.Fatalf("join moved %d, leave moved %d: not consistent", join, leave)
	}
}

func TestRingRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		members []string
		cfg     partition.RingConfig
	}{
		{"load below 1", []string{"a"}, partition.RingConfig{Load: 0.5}},
		{"negative load", []string{"a"}, partition.RingConfig{Load: -1}},
		{"NaN load", []string{"a"}, partition.RingConfig{Load: math.NaN()}},
		{"infinite load", []string{"a"}, partition.RingConfig{Load: math.Inf(1)}},
		{"negative partitions", []string{"a"}, partition.RingConfig{Partitions: -1}},
		{"too many partitions", []string{"a"}, partition.RingConfig{Partitions: partition.MaxPartitions + 1}},
		{"negative replication", []string{"a"}, partition.RingConfig{ReplicationFactor: -3}},
		{"duplicate member", []string{"a", "b", "a"}, partition.RingConfig{}},
		{"empty member", []string{"a", ""}, partition.RingConfig{}},
		{"member with NUL", []string{"a\x00"}, partition.RingConfig{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := partition.NewRing(tt.members, &tt.cfg); !errors.Is(err, partition.ErrInvalid) {
				t.Fatalf("NewRing = %v, want ErrInvalid", err)
			}
		})
	}
	// Load exactly 1 always fits: ceil(partitions/members) per member.
	for n := 1; n <= 7; n++ {
		var ms []string
		for i := range n {
			ms = append(ms, fmt.Sprintf("m%d", i))
		}
		if _, err := partition.NewRing(ms, &partition.RingConfig{Load: 1, Partitions: 13, ReplicationFactor: 1}); err != nil {
			t.Fatalf("%d members, load 1: %v", n, err)
		}
	}
}

// Keys and names in error messages are shortened: a 10 KB key (which Do
// accepts) does not make a 10 KB error, nor a 10 KB 503 body in Forward.
func TestErrorsShortenKeys(t *testing.T) {
	long := strings.Repeat("k", 10240)
	for _, err := range []error{
		&partition.NotOwnerError{Key: long, Partition: 1, Owner: long[:255], Addr: long[:255]},
		&partition.StaleEpochError{Partition: 1, Presented: 1, Required: 2, Owner: long[:255]},
	} {
		if msg := err.Error(); len(msg) > 400 || !strings.Contains(msg, "bytes)") {
			t.Errorf("%T message of %d bytes: %.100s…", err, len(msg), msg)
		}
	}
	if _, err := partition.NewRing([]string{long[:255], long[:255]}, &partition.RingConfig{}); err == nil || len(err.Error()) > 200 {
		t.Errorf("duplicate member: %v", err)
	}
}
