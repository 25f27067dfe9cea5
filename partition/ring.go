package partition

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"

	"github.com/buraksezer/consistent"

	"github.com/lockfree-go/lockfree/internal/short"
)

// LibraryVersion is the version of github.com/buraksezer/consistent whose
// placement the ring reproduces; it is part of [Ring.ID]. Placement changed
// between versions (v0.10.0 places 221 of 271 partitions differently), so
// a fleet must run one version.
const LibraryVersion = "v1.0.0"

// Limits on RingConfig.
const (
	// MaxPartitions is the largest partition count.
	MaxPartitions = 1 << 16
	// MaxReplicationFactor is the largest number of points per member.
	MaxReplicationFactor = 1 << 10
)

// RingConfig shapes the ring. Every member of a fleet must use the same
// values. A nil *RingConfig, like the zero value, means the defaults.
type RingConfig struct {
	// Partitions is the number of partitions keys hash to; changing it
	// remaps keys. Defaults to 271.
	Partitions int
	// ReplicationFactor is the number of points each member has on the
	// ring. Defaults to 20.
	ReplicationFactor int
	// Load bounds every member's share at Load × the average (rounded up);
	// it must be at least 1, or partitions would not fit. Defaults to 1.25.
	Load float64
}

func (rc *RingConfig) withDefaults() RingConfig {
	var c RingConfig
	if rc != nil {
		c = *rc
	}
	if c.Partitions == 0 {
		c.Partitions = consistent.DefaultPartitionCount
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = consistent.DefaultReplicationFactor
	}
	if c.Load == 0 {
		c.Load = consistent.DefaultLoad
	}
	return c
}

func (c RingConfig) validate() error {
	switch {
	case c.Partitions < 1 || c.Partitions > MaxPartitions:
		return fmt.Errorf("%w: partitions %d outside [1, %d]", ErrInvalid, c.Partitions, MaxPartitions)
	case c.ReplicationFactor < 1 || c.ReplicationFactor > MaxReplicationFactor:
		return fmt.Errorf("%w: replication factor %d outside [1, %d]", ErrInvalid, c.ReplicationFactor, MaxReplicationFactor)
	case math.IsNaN(c.Load) || math.IsInf(c.Load, 0) || c.Load < 1:
		return fmt.Errorf("%w: load %v is not a finite number ≥ 1", ErrInvalid, c.Load)
	}
	return nil
}

// fnv64a is the ring's hasher: FNV-1a 64 from the standard library, for
// partition keys, ring points and keys alike.
type fnv64a struct{}

func (fnv64a) Sum64(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

type ringMember string

func (m ringMember) String() string { return string(m) }

// Ring places partitions on members. It is immutable and safe for concurrent
// use; build a new one with NewRing when the members change. The zero value
// is not usable.
type Ring struct {
	cfg     RingConfig
	members []string // sorted
	owners  []string // per partition; nil when there are no members
}

// NewRing returns the ring of members (in any order; names must be unique,
// non-empty and at most MaxNameLen bytes) under cfg; a nil cfg means the
// defaults. The placement depends only on the set of names, cfg and
// LibraryVersion. An empty member list gives a ring on which no partition
// has an owner. Bad names or a bad cfg give an error matching ErrInvalid.
func NewRing(members []string, cfg *RingConfig) (*Ring, error) {
	return newRing(members, cfg.withDefaults())
}

// newRing is NewRing for a configuration with its defaults filled in.
func newRing(members []string, cfg RingConfig) (*Ring, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	sorted := slices.Clone(members)
	slices.Sort(sorted)
	for i, m := range sorted {
		if err := validName("member name", m, false); err != nil {
			return nil, err
		}
		if i > 0 && sorted[i-1] == m {
			return nil, fmt.Errorf("%w: member %s appears twice", ErrInvalid, short.Quote(m))
		}
	}
	r := &Ring{cfg: cfg, members: sorted}
	if len(sorted) == 0 {
		return r, nil
	}
	owners, err := place(sorted, cfg)
	if err != nil {
		return nil, err
	}
	r.owners = owners
	return r, nil
}

// place runs the library, turning its panics into errors. Members are added
// in sorted order so that the ring does not depend on the caller's order
// even if two points collide.
func place(members []string, cfg RingConfig) (owners []string, err error) {
	defer func() {
		if p := recover(); p != nil {
			owners, err = nil, fmt.Errorf("%w: ring: %v", ErrInvalid, p)
		}
	}()
	ms := make([]consistent.Member, len(members))
	for i, m := range members {
		ms[i] = ringMember(m)
	}
	c := consistent.New(ms, consistent.Config{
		Hasher:            fnv64a{},
		PartitionCount:    cfg.Partitions,
		ReplicationFactor: cfg.ReplicationFactor,
		Load:              cfg.Load,
	})
	owners = make([]string, cfg.Partitions)
	for p := range owners {
		o := c.GetPartitionOwner(p)
		if o == nil {
			return nil, fmt.Errorf("%w: ring left partition %d without owner", ErrInvalid, p)
		}
		owners[p] = o.String()
	}
	return owners, nil
}

// Partitions returns the number of partitions.
func (r *Ring) Partitions() int { return r.cfg.Partitions }

// Members returns the ring's members, sorted.
func (r *Ring) Members() []string { return slices.Clone(r.members) }

// Partition returns the partition of key: FNV-1a 64 of its bytes modulo the
// partition count, as the library computes it. It does not depend on the
// members.
func (r *Ring) Partition(key string) int { return partitionOf(key, r.cfg.Partitions) }

func partitionOf(key string, partitions int) int {
	return int(fnv64a{}.Sum64([]byte(key)) % uint64(partitions))
}

// Owner returns the member that owns partition p, or "" when the ring has
// no members or p is out of range.
func (r *Ring) Owner(p int) string {
	if r.owners == nil || p < 0 || p >= len(r.owners) {
		return ""
	}
	return r.owners[p]
}

// Load returns how many partitions each member owns.
func (r *Ring) Load() map[string]int {
	load := make(map[string]int, len(r.members))
	for _, o := range r.owners {
		load[o]++
	}
	return load
}

// ID identifies the placement function: library version, hasher and
// configuration. Two rings with the same ID place the same members alike.
func (r *Ring) ID() string { return r.cfg.id() }

func (c RingConfig) id() string {
	return "consistent@" + LibraryVersion + " fnv64a partitions=" + strconv.Itoa(c.Partitions) +
		" replication=" + strconv.Itoa(c.ReplicationFactor) + " load=" + strconv.FormatFloat(c.Load, 'g', -1, 64)
}

// Moved returns the partitions whose owner differs between two rings of the
// same partition count, in increasing order.
func Moved(from, to *Ring) []int {
	var moved []int
	for p := 0; p < min(from.Partitions(), to.Partitions()); p++ {
		if from.Owner(p) != to.Owner(p) {
			moved = append(moved, p)
		}
	}
	return moved
}
