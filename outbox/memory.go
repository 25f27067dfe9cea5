package outbox

import (
	"context"
	"slices"
	"sync"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/partition"
)

// MemoryConfig configures a Memory store. A nil *MemoryConfig means the
// defaults.
type MemoryConfig struct {
	// Partitions is the number of partitions entity keys hash to, as in
	// PostgresConfig. Defaults to DefaultPartitions (32).
	Partitions int
	// MaxEventBytes bounds an event, as in PostgresConfig. Defaults to
	// DefaultMaxEventBytes (1,000,000).
	MaxEventBytes int
	// Clock stamps events and decides the relays' membership leases; tests
	// pass a *clock.Manual. Defaults to the system clock.
	Clock clock.Clock
}

// Memory is the outbox in this process's memory, with the relays' fleet in
// a partition.Memory: for tests of code that writes events, and for relays
// in one process. Write has no transaction to join: the event is in the
// outbox once Write returns. Sequences start at 1. It is safe for
// concurrent use; the zero value is not usable: call NewMemory.
type Memory struct {
	clock   clock.Clock
	cfg     storeConfig
	ring    *partition.Ring
	members *partition.Memory

	mu     sync.Mutex
	pos    int64
	seqs   map[string]int64
	events map[int][]Record // per partition, oldest first
}

// NewMemory returns an empty outbox. A nil cfg means the defaults; a bad
// one gives an error matching ErrInvalid.
func NewMemory(cfg *MemoryConfig) (*Memory, error) {
	var c MemoryConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Clock == nil {
		c.Clock = clock.System()
	}
	sc := storeConfig{partitions: c.Partitions, maxEventBytes: c.MaxEventBytes}.withDefaults()
	if err := sc.validate(); err != nil {
		return nil, err
	}
	members, err := partition.NewMemory(&partition.MemoryConfig{Clock: c.Clock})
	if err != nil {
		return nil, err
	}
	return &Memory{clock: c.Clock, cfg: sc, ring: sc.ring(), members: members,
		seqs: map[string]int64{}, events: map[int][]Record{}}, nil
}

// Partitions implements Store.
func (m *Memory) Partitions() int { return m.cfg.partitions }

// Write adds ev to the outbox and returns it as stored, with the entity's
// next sequence. Bad input gives an error matching ErrInvalid.
func (m *Memory) Write(_ context.Context, ev Event) (Record, error) {
	ev, err := prepare(ev, m.cfg.maxEventBytes)
	if err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pos++
	m.seqs[ev.Key]++
	r := Record{Event: ev, Seq: m.seqs[ev.Key], Partition: m.ring.Partition(ev.Key), Created: m.clock.Now(), pos: m.pos}
	m.events[r.Partition] = append(m.events[r.Partition], r)
	return r, nil
}

// Pending returns the events written and not yet published, oldest first.
func (m *Memory) Pending() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Record
	for _, evs := range m.events {
		out = append(out, evs...)
	}
	slices.SortFunc(out, func(a, b Record) int { return int(a.pos - b.pos) })
	return out
}

func (m *Memory) membership() partition.Membership { return m.members }

func (m *Memory) config() storeConfig { return m.cfg }

func (m *Memory) busy(_ context.Context, ps []int) ([]int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for _, p := range ps {
		if len(m.events[p]) > 0 {
			out = append(out, p)
		}
	}
	return out, nil
}

func (m *Memory) pending(_ context.Context, p, limit int) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	evs := m.events[p]
	return slices.Clone(evs[:min(limit, len(evs))]), nil
}

func (m *Memory) published(_ context.Context, e partition.Epoch, recs []Record) error {
	done := make(map[int64]bool, len(recs))
	for _, r := range recs {
		done[r.pos] = true
	}
	del := func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.events[e.Partition] = slices.DeleteFunc(m.events[e.Partition], func(r Record) bool { return done[r.pos] })
		return nil
	}
	return m.members.Verify(e, del)
}

func (m *Memory) highest(context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := -1
	for p, evs := range m.events {
		if len(evs) > 0 {
			h = max(h, p)
		}
	}
	return h, nil
}
