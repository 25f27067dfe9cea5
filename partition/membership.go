package partition

import (
	"context"
	"fmt"
	"time"
)

// Limits on membership leases.
const (
	// MinTTL is the shortest membership lease.
	MinTTL = 10 * time.Millisecond
	// MaxTTL is the longest membership lease: a member that vanishes keeps
	// its partitions unserved this long.
	MaxTTL = time.Hour
)

// MemberInfo is a member as the membership store records it.
type MemberInfo struct {
	// Name identifies the member in the ring; unique among live members.
	Name string
	// Addr is where other members forward requests for its partitions
	// (host:port); it may be empty.
	Addr string
	// Ring is the [Ring.ID] the member places partitions with.
	Ring string
	// Incarnation distinguishes successive leases under one name: it is
	// set by Join and increases with every Join.
	Incarnation int64
	// Leaving is set by a member that is shutting down: it stays live
	// (its partitions cannot be claimed until it releases them) but is no
	// longer placed on the ring.
	Leaving bool
}

// Membership is the store of member leases and partition ownership rows: a
// [Postgres] database or [Memory]. Expiry follows the store's clock.
// Implementations are safe for concurrent use; the partitiontest package
// checks one.
type Membership interface {
	// Join starts a lease of ttl for m.Name and returns m with a new
	// Incarnation. It fails with ErrNameInUse while another lease of that
	// name is live.
	Join(ctx context.Context, m MemberInfo, ttl time.Duration) (MemberInfo, error)
	// Heartbeat extends the lease of (name, incarnation) to ttl from now. It
	// returns ErrExpired if that lease expired or was replaced: it never
	// revives a lease.
	Heartbeat(ctx context.Context, name string, incarnation int64, ttl time.Duration) error
	// SetLeaving marks the live lease (name, incarnation) as leaving.
	// It returns ErrExpired if the lease is not live.
	SetLeaving(ctx context.Context, name string, incarnation int64) error
	// Leave ends the lease (name, incarnation) at once. Leaving a lease that
	// is already gone is not an error.
	Leave(ctx context.Context, name string, incarnation int64) error
	// Live returns the members whose leases have not expired, by name.
	Live(ctx context.Context) ([]MemberInfo, error)

	// Owners returns the ownership of partitions 0…partitions-1, indexed by
	// partition; a partition never claimed has Owner "" and Token 0, and a
	// released one Owner "" and its last Token.
	Owners(ctx context.Context, partitions int) ([]Epoch, error)
	// Claim gives the partitions to member (whose live lease is
	// incarnation), bumping each one's epoch, where the current owner is
	// none, member itself, or a member whose lease has expired; it returns
	// the epochs of the partitions it claimed, in increasing partition
	// order, and skips the others. It fails with ErrExpired when member's
	// lease is not live.
	Claim(ctx context.Context, member string, incarnation int64, partitions []int) ([]Epoch, error)
	// Release gives up the partitions of epochs that are still current,
	// keeping their epochs. It returns a *StaleEpochError (joined, one per
	// epoch) for those that were not current: someone else owns them.
	Release(ctx context.Context, epochs []Epoch) error
	// Check returns nil if e is its partition's current owner and epoch, and
	// a *StaleEpochError otherwise. The answer may be stale when it arrives:
	// protect writes with the backend's Verify or Condition, which hold the
	// partition until the write commits.
	Check(ctx context.Context, e Epoch) error
}

func validJoin(m MemberInfo, ttl time.Duration) error {
	if err := validName("member name", m.Name, false); err != nil {
		return err
	}
	if err := validName("member address", m.Addr, true); err != nil {
		return err
	}
	if err := validName("ring id", m.Ring, true); err != nil {
		return err
	}
	return validTTL(ttl)
}

func validTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl %v outside [%v, %v]", ErrInvalid, ttl, MinTTL, MaxTTL)
	}
	return nil
}

func validLease(name string, incarnation int64) error {
	if err := validName("member name", name, false); err != nil {
		return err
	}
	if incarnation <= 0 {
		return fmt.Errorf("%w: incarnation %d", ErrInvalid, incarnation)
	}
	return nil
}

func validPartitions(ps []int) error {
	for i, p := range ps {
		if p < 0 || p >= MaxPartitions {
			return fmt.Errorf("%w: partition %d outside [0, %d)", ErrInvalid, p, MaxPartitions)
		}
		if i > 0 && ps[i-1] >= p {
			return fmt.Errorf("%w: partitions not strictly increasing", ErrInvalid)
		}
	}
	return nil
}
