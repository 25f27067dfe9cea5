// Package outbox publishes events to Kafka exactly once downstream, in
// order per entity, without a lock. Example first (memory backend).
//
// [Postgres.WithDB] writes an event in the caller's transaction: it is
// published if and only if the transaction commits. Write raises the
// entity's sequence in the same statement, so sequences follow commit
// order. [Relay]s share the outbox's partitions as a [partition] fleet; a
// partition's owner publishes its events in order, then deletes them with
// a statement fenced by its epoch.
//
// Guarantee, with a kafkawriter.Consumer whose Dedupe is on:
//   - Every event whose transaction committed is applied exactly once.
//   - An entity's events are applied in sequence order.
//   - Kafka may hold copies (an uncertain publish sent again, a crash
//     between publish and delete, a restore, a relay paused past its
//     lease). The inbox drops each one by event ID or by sequence.
//   - An event's first record lands after its entity's earlier events'.
//
// The relays' epochs keep two relays off one partition; the inbox's
// checks make copies harmless.
//
// Not protected:
//   - Consumers without Dedupe apply every copy.
//   - A copy that arrives after the inbox's DedupeRetention forgot its ID.
//   - Order across entities; order across a change of partition counts
//     (drain the outbox first).
//   - Writes after a restore before fence_advance (ErrFenceEra).
//   - [Memory]: this process only, outside any transaction.
//
// docs/outbox.md has the relay's faults, their tests and the cost.
package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/partition"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

var (
	// ErrInvalid reports bad input or configuration, detected before
	// anything was written.
	ErrInvalid = errors.New("outbox: invalid argument")
	// ErrStopped reports a Start of a relay that was stopped: a relay runs
	// once.
	ErrStopped = errors.New("outbox: relay stopped")
	// ErrStaleEpoch reports a relay's delete of published events refused
	// because a newer relay owns the partition: the events may have been
	// published twice (the inbox drops the copies), and the relay stops
	// publishing the partition. It is partition.ErrStaleEpoch; the error
	// is a *partition.StaleEpochError.
	ErrStaleEpoch = partition.ErrStaleEpoch
	// ErrFenceEra reports a Write whose sequence the database refused to
	// mint, because it could be lower than one already handed out: the
	// database moved to a cluster whose WAL timeline is lower than the era
	// it had reached (a restore or an upgrade onto a new cluster). The error
	// is a *FenceError naming the statement an operator runs
	// (fence_advance). Run it after any restore from a backup, even one
	// that Write does not refuse: a restored entity row would otherwise
	// hand out sequences that consumers have already seen, and drop the
	// new events as old.
	ErrFenceEra = fence.ErrEra
	// ErrFenceReadOnly reports a Write on a read-only server: a standby
	// (connect with target_session_attrs=read-write) or a read-only
	// transaction. The error is a *FenceError.
	ErrFenceReadOnly = fence.ErrReadOnly
)

// FenceError is a sequence the database refused to mint: it matches
// ErrFenceEra or ErrFenceReadOnly (its Kind), unwraps to the server's
// *pgconn.PgError, and says what an operator does about it. It is the same
// type as fencedlock.FenceError.
type FenceError = fence.Error

// Limits on events and stores.
const (
	// MaxKeyLen is the longest entity key, event ID or header key, in
	// bytes.
	MaxKeyLen = 255
	// MaxPartitions is the largest partition count of an outbox.
	MaxPartitions = 1024
	// DefaultPartitions is the partition count of an outbox by default.
	DefaultPartitions = 32
	// DefaultMaxEventBytes bounds an event by default: its key, ID,
	// payload and headers together (each header counting HeaderOverhead
	// more), below the 1 MiB that Kafka accepts in a record batch by
	// default (message.max.bytes).
	DefaultMaxEventBytes = 1_000_000
	// HeaderOverhead is what each header adds to an event's size, beside
	// its key and value: the two lengths that encode it in a record. So
	// many empty headers cannot make a record far larger than its size.
	HeaderOverhead = 10
)

// Event is an event to publish: a Kafka record keyed by its entity. It is a
// value; Write keeps no reference to its slices once it returns.
type Event struct {
	// Key is the entity the event belongs to: the record's key, which also
	// picks the outbox partition and the topic's partition, and orders the
	// entity's events. 1–255 bytes of UTF-8 without NUL. Required.
	Key string
	// ID identifies the event for the inbox's deduplication: copies of an
	// event share it. Derive it from what identifies the request that
	// writes it (idempotency.DeriveKey, an operation ID), so that a retried
	// request writes the same ID. 1–255 bytes of UTF-8 without NUL.
	// Defaults to a new UUIDv7, which deduplicates the relay's copies but
	// not a second Write of the same event.
	ID string
	// Payload is the record's value; nil publishes a record without a value
	// (a tombstone on a compacted topic).
	Payload []byte
	// Headers are the record's headers. Keys are 1–255 bytes of UTF-8
	// without NUL, other than kafkawriter.HeaderEventID and HeaderEventSeq,
	// which the relay sets.
	Headers []kafka.Header
}

// Record is an event as Write stored it. It is a value; copies are
// independent.
type Record struct {
	Event
	// Seq is the event's sequence within its entity: greater than every
	// earlier event's of the entity (Postgres: minted in fence eras, so it
	// starts at era·2^40 and jumps at a failover; not contiguous).
	Seq int64
	// Partition is the outbox partition Key hashes to.
	Partition int
	// Created is when the event was written, by the store's clock.
	Created time.Time

	pos int64 // the store's position: publication order within a partition
}

// Store is an outbox backend: Postgres or Memory. Write puts events in it;
// a Relay publishes them. Its other methods are the relay's, and
// unexported: the relay's safety rests on them (a publication order and a
// delete fenced by the partition epoch, atomically), so the package keeps
// its implementations. Both are safe for concurrent use.
type Store interface {
	// Write adds ev to the outbox and returns it as stored.
	Write(ctx context.Context, ev Event) (Record, error)
	// Partitions is the number of partitions entity keys hash to.
	Partitions() int

	// membership is the store of the relays' fleet.
	membership() partition.Membership
	// busy returns those of ps that hold events.
	busy(ctx context.Context, ps []int) ([]int, error)
	// pending returns up to limit events of partition p, oldest first.
	pending(ctx context.Context, p, limit int) ([]Record, error)
	// published deletes recs if e is still their partition's owner and
	// epoch, and returns a *partition.StaleEpochError otherwise.
	published(ctx context.Context, e partition.Epoch, recs []Record) error
	// highest returns the highest partition holding an event, or -1.
	highest(ctx context.Context) (int, error)
	// config returns the store's configuration.
	config() storeConfig
}

// storeConfig is what both stores share of their configuration.
type storeConfig struct {
	partitions, maxEventBytes int
}

func (c storeConfig) withDefaults() storeConfig {
	if c.partitions == 0 {
		c.partitions = DefaultPartitions
	}
	if c.maxEventBytes == 0 {
		c.maxEventBytes = DefaultMaxEventBytes
	}
	return c
}

func (c storeConfig) validate() error {
	switch {
	case c.partitions < 1 || c.partitions > MaxPartitions:
		return fmt.Errorf("%w: partitions %d outside [1, %d]", ErrInvalid, c.partitions, MaxPartitions)
	case c.maxEventBytes < 1:
		return fmt.Errorf("%w: max event bytes %d", ErrInvalid, c.maxEventBytes)
	}
	return nil
}

// ring is a store's key-to-partition function: the same as the relays'
// fleet's, partition.Ring.Partition.
func (c storeConfig) ring() *partition.Ring {
	r, err := partition.NewRing(nil, &partition.RingConfig{Partitions: c.partitions})
	if err != nil {
		panic("outbox: " + err.Error()) // validate checked the count
	}
	return r
}

// prepare validates ev and returns it with its ID filled, and its size.
func prepare(ev Event, maxBytes int) (Event, error) {
	if err := validText("key", ev.Key); err != nil {
		return Event{}, err
	}
	if ev.ID == "" {
		ev.ID = uuid.Must(uuid.NewV7()).String()
	} else if err := validText("event ID", ev.ID); err != nil {
		return Event{}, err
	}
	for _, h := range ev.Headers {
		if err := validText("header key", h.Key); err != nil {
			return Event{}, err
		}
		if h.Key == kafkawriter.HeaderEventID || h.Key == kafkawriter.HeaderEventSeq {
			return Event{}, fmt.Errorf("%w: header %s is the relay's", ErrInvalid, h.Key)
		}
	}
	if size := eventSize(ev); size > maxBytes {
		return Event{}, fmt.Errorf("%w: event of %s is %d bytes, above %d", ErrInvalid, short.Quote(ev.Key), size, maxBytes)
	}
	ev.Payload = bytes.Clone(ev.Payload)
	headers := make([]kafka.Header, len(ev.Headers))
	for i, h := range ev.Headers {
		headers[i] = kafka.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
	}
	ev.Headers = headers
	return ev, nil
}

// eventSize is what MaxEventBytes bounds: ev's key, ID, payload and
// headers, each header counting HeaderOverhead more.
func eventSize(ev Event) int {
	n := len(ev.Key) + len(ev.ID) + len(ev.Payload)
	for _, h := range ev.Headers {
		n += len(h.Key) + len(h.Value) + HeaderOverhead
	}
	return n
}

// validText checks a key, an ID or a header key: text columns.
func validText(what, s string) error {
	if s == "" || len(s) > MaxKeyLen || !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s %s must be 1–%d bytes of UTF-8 without NUL", ErrInvalid, what, short.Quote(s), MaxKeyLen)
	}
	return nil
}
