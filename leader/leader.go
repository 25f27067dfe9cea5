// Package leader elects one leader among candidates, and gives each term a
// fencing token that the resources the leader writes can check.
//
// A candidate calls Campaign, which blocks until it leads and returns a
// [Term]: a lease on the election's lock, renewed in the background, whose
// token is the term number. Observers follow the leader, its term and its
// value with Observe; the leader changes its value with Proclaim and hands
// over at once with Resign.
//
// The guarantee:
//
//   - At most one term is current at a time, on the store's clock, and terms
//     strictly increase: every term is a fencedlock token of the election's
//     lock. On PostgreSQL tokens are minted in fence eras, so a term after a
//     failover is above every term before it (docs/failover.md).
//   - A term's Context is cancelled, with a cause, before the store can
//     elect anyone else — as long as the leader's process runs: when a
//     renewal finds the lease gone (fencedlock.ErrLost), when renewals fail
//     until the safety margin (fencedlock.ErrExpiring), at Resign
//     (ErrResigned), or when Campaign's ctx ends.
//   - A term's token works with fencedlock.Fence and fencedlock.Gate: a
//     resource that checks it refuses the writes of a leader whose term has
//     been superseded, however long it was paused.
//
// What it does NOT protect: a leader paused past its lease (GC, swap,
// SIGSTOP) runs no timers, so its context is an early warning, never a
// guarantee; its writes are refused only by a resource that checks the term
// (Fence.Update, Fence.Read, Postgres.Verify, Gate.Do). A write that carries
// no term, or goes to a resource that cannot check one (an e-mail, a
// third-party API), can land twice. Observe reports the latest state, not
// every step: two quick changes can reach an observer as one.
//
// Backends: any fencedlock store that keeps values on leases (Store):
// fencedlock.Postgres (its migrations, 004 or later) and fencedlock.Memory.
// The election keeps nothing of its own: its lock is a row of the lock
// table, listed by fencedlock's List like any other.
package leader

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/fencedlock"
)

var (
	// ErrInvalid reports bad input, detected before anything was written.
	ErrInvalid = errors.New("leader: invalid argument")
	// ErrResigned is the cause of a term's context after Resign.
	ErrResigned = errors.New("leader: resigned")
	// ErrNotLeader reports a Proclaim by a term that has ended: its lease
	// is lost, or its context ended (the error wraps the cause).
	ErrNotLeader = errors.New("leader: not the leader")
)

// Store is what an election needs of a lock store: leases that carry a
// value. fencedlock.Memory and fencedlock.Postgres implement it. A store
// that also implements fencedlock.Wakeups wakes waiting candidates at a
// release (Memory; Postgres with Notify on a pool), and one that implements
// fencedlock.Watcher wakes observers at a change; without them candidates
// and observers poll.
type Store interface {
	fencedlock.ValueStore
}

// DefaultLockPrefix is the prefix of an election's lock name when
// Config.LockPrefix is empty.
const DefaultLockPrefix = "leader/"

// Config configures an Election. A nil *Config means the defaults.
type Config struct {
	// Holder identifies this candidate in the lock table and to observers
	// (Leader.Holder). Two processes must not share one: a restarted
	// candidate with the same Holder waits for its old term to expire.
	// Defaults to a new UUIDv7 per Election.
	Holder string
	// TTL is the lease of each term, between fencedlock.MinTTL and
	// fencedlock.MaxTTL: how long the election stays without a leader
	// after a leader crashes. Defaults to fencedlock.DefaultTTL (10s).
	TTL time.Duration
	// LockPrefix is prepended to the election's name to make its lock
	// name. Defaults to DefaultLockPrefix ("leader/").
	LockPrefix string
	// Wait configures a candidate's wait while another leads. Defaults to
	// the fencedlock.WaitConfig defaults (with the store's own wake-ups).
	Wait *fencedlock.WaitConfig
	// Keepalive configures the renewal of a term's lease. A Keepalive given
	// here is taken as fencedlock reads it (its zero MaxRenewals means
	// 100). Defaults to the fencedlock.KeepaliveConfig defaults, except
	// that a term is renewed without bound (MaxRenewals −1): it lasts until
	// Resign, the loss of its lease, or the end of Campaign's ctx.
	Keepalive *fencedlock.KeepaliveConfig
	// ObserveInterval is how often Observe reads the leader when no notice
	// wakes it: it bounds how late an observer sees a lease expire. At
	// least a millisecond. Defaults to TTL/4.
	ObserveInterval time.Duration
	// Logger receives Observe's failed reads (it retries them). Defaults to
	// none.
	Logger *slog.Logger
	// MeterProvider receives the election's metrics (docs/leader.md,
	// "Metrics"). Defaults to none: nothing is recorded.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span for each Campaign, with the lock
	// name, holder and, once elected, the term. Defaults to none.
	TracerProvider trace.TracerProvider
}

func (c *Config) withDefaults() Config {
	var d Config
	if c != nil {
		d = *c
	}
	if d.Holder == "" {
		d.Holder = uuid.Must(uuid.NewV7()).String()
	}
	if d.TTL == 0 {
		d.TTL = fencedlock.DefaultTTL
	}
	if d.LockPrefix == "" {
		d.LockPrefix = DefaultLockPrefix
	}
	if d.Keepalive == nil {
		d.Keepalive = &fencedlock.KeepaliveConfig{MaxRenewals: -1}
	}
	if d.ObserveInterval == 0 {
		d.ObserveInterval = d.TTL / 4
	}
	return d
}

func (c Config) validate() error {
	if err := validName("holder", c.Holder); err != nil {
		return err
	}
	if c.TTL < fencedlock.MinTTL || c.TTL > fencedlock.MaxTTL {
		return fmt.Errorf("%w: TTL %v outside [%v, %v]", ErrInvalid, c.TTL, fencedlock.MinTTL, fencedlock.MaxTTL)
	}
	if c.ObserveInterval < time.Millisecond {
		return fmt.Errorf("%w: observe interval %v below 1ms", ErrInvalid, c.ObserveInterval)
	}
	if err := c.Keepalive.Validate(c.TTL); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := c.Wait.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// validName checks a name that goes into the lock table as it is.
func validName(what, s string) error {
	if s == "" || len(s) > fencedlock.MaxNameLen || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return fmt.Errorf("%w: %s must be 1 to %d bytes of UTF-8 without NUL", ErrInvalid, what, fencedlock.MaxNameLen)
	}
	return nil
}

// Leader is who leads an election, as Election.Leader and Observe report
// it. The zero Leader means that no one leads.
type Leader struct {
	// Holder is the leader's Config.Holder.
	Holder string
	// Term is the term's fencing token: above every earlier term's of the
	// election; 0 when no one leads.
	Term int64
	// Value is the leader's value (Campaign, Proclaim); "" when none.
	Value string
}
