package kafkawriter

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
)

// Headers that identify an event, set by package outbox and read by
// Inbox.Dedupe (a Consumer with Dedupe on).
const (
	// HeaderEventID carries the event's ID: 1–255 bytes of UTF-8 without
	// NUL, the same on every copy of the event (a relay's retry, a resend
	// after ErrUncertain, a republish after a restore).
	HeaderEventID = "lockfree-event-id"
	// HeaderEventSeq carries the event's sequence number within its entity
	// (the message key), in decimal: it strictly increases from one event of
	// the entity to the next, in the order the events were written.
	HeaderEventSeq = "lockfree-event-seq"
)

// DefaultDedupeRetention is how long a Consumer with Dedupe on remembers
// the IDs of the events it applied.
const DefaultDedupeRetention = 7 * 24 * time.Hour

// The statements of Dedupe and Purge. Dedupe sends the first two in one
// batch — the claim of the event IDs, the read of the entities' sequences,
// locked until the transaction ends — then, once it has decided which
// messages to keep, raises the sequences of their entities.
const (
	sqlClaimEvents = `INSERT INTO {{inbox_events}} (group_id, topic, event_id, applied_at)
		SELECT $1, $2, id, clock_timestamp() FROM unnest($3::text[]) AS id
		ON CONFLICT (group_id, topic, event_id) DO NOTHING
		RETURNING event_id`
	sqlEntitySeqs = `SELECT entity, seq FROM {{inbox_entities}}
		WHERE group_id = $1 AND topic = $2 AND entity = ANY($3::bytea[]) FOR UPDATE`
	sqlRaiseSeqs = `INSERT INTO {{inbox_entities}} AS e (group_id, topic, entity, seq)
		SELECT $1, $2, k, s FROM unnest($3::bytea[], $4::bigint[]) AS m(k, s)
		ON CONFLICT (group_id, topic, entity) DO UPDATE SET seq = greatest(e.seq, excluded.seq)`
	sqlPurgeEvents = `DELETE FROM {{inbox_events}} WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM {{inbox_events}}
		WHERE group_id = $1 AND topic = $2 AND applied_at < clock_timestamp() - $3 * interval '1 microsecond'
		LIMIT $4))`
)

// purgeBatch bounds the rows one purge statement deletes, so that a purge
// holds few locks at a time.
const purgeBatch = 10000

// eventOf is what Dedupe reads of a message: its ID ("" without one) and
// its sequence (0 without one).
type eventOf struct {
	id  string
	seq int64
}

// dedupeCounts says why Dedupe dropped messages.
type dedupeCounts struct {
	byID, bySeq int
}

func (d dedupeCounts) total() int { return d.byID + d.bySeq }

// Dedupe returns the messages of msgs that have not been applied before, in
// order, and records them as applied: call it on the transaction that
// applies them and advances the offset (in.WithDB(tx).Dedupe), before the
// handler, and apply only what it returns. msgs are messages of the claim's
// topic, in offset order. A message is dropped when
//
//   - its event ID (header HeaderEventID) was recorded as applied — by an
//     earlier transaction of the claim's group and topic, or earlier in msgs;
//     a copy that arrives while another transaction applies the same ID waits
//     for it to commit or roll back; or
//   - its sequence (header HeaderEventSeq) is not above the highest
//     applied for its key: it is an older event of the entity, or a copy of
//     one applied. This check needs no retention: a copy that arrives after
//     its ID was purged is still dropped.
//
// A message without an ID is not checked by ID, one without a sequence not
// by sequence: those are deduplicated by offset only. A malformed header (a
// sequence that is not a positive decimal integer, an ID or key outside
// 1–255 bytes, a sequence without a key) gives an error matching ErrInvalid:
// the message can never be applied (a Consumer retries it and dead-letters
// it). IDs are recorded in the inbox_events table until Purge removes
// them; each key's highest sequence applied in inbox_entities, for good. It
// costs two round trips.
func (in *Inbox) Dedupe(ctx context.Context, c Claim, msgs []kafka.Message) ([]kafka.Message, error) {
	fresh, _, err := in.dedupe(ctx, c, msgs)
	return fresh, err
}

func (in *Inbox) dedupe(ctx context.Context, c Claim, msgs []kafka.Message) ([]kafka.Message, dedupeCounts, error) {
	if err := in.usable(); err != nil {
		return nil, dedupeCounts{}, err
	}
	if err := validPartition(c.GroupID, c.Topic, c.Partition); err != nil {
		return nil, dedupeCounts{}, err
	}
	evs := make([]eventOf, len(msgs))
	var ids []string
	var keys [][]byte
	for i, m := range msgs {
		ev, err := readEvent(c, m)
		if err != nil {
			return nil, dedupeCounts{}, err
		}
		evs[i] = ev
		if ev.id != "" {
			ids = append(ids, ev.id)
		}
		if ev.seq > 0 {
			keys = append(keys, m.Key)
		}
	}
	if len(ids) == 0 && len(keys) == 0 {
		return msgs, dedupeCounts{}, nil
	}
	fail := func(err error) ([]kafka.Message, dedupeCounts, error) {
		return nil, dedupeCounts{}, fmt.Errorf("kafkawriter: dedupe %s/%d: %w", short.Quote(c.Topic), c.Partition, err)
	}
	claimed, last, err := in.lookup(ctx, c, ids, keys)
	if err != nil {
		return fail(err)
	}
	fresh, raised, counts := keepFresh(msgs, evs, claimed, last)
	if len(raised) > 0 {
		keys, seqs := make([][]byte, 0, len(raised)), make([]int64, 0, len(raised))
		for k, seq := range raised {
			keys, seqs = append(keys, []byte(k)), append(seqs, seq)
		}
		if _, err := in.db.Exec(ctx, in.sql.raiseSeqs, c.GroupID, c.Topic, keys, seqs); err != nil {
			return fail(err)
		}
	}
	return fresh, counts, nil
}

// keepFresh is Dedupe's decision, from what the inbox answered: claimed
// holds the IDs recorded by this call (not seen before), last each key's
// highest sequence applied before it. It returns the messages to keep, and
// the highest sequence among them of each key it keeps a sequenced message
// of: a dropped message raises no sequence.
func keepFresh(msgs []kafka.Message, evs []eventOf, claimed map[string]bool, last map[string]int64) (
	fresh []kafka.Message, raised map[string]int64, counts dedupeCounts) {
	byID := !failpoint.Mutant("kafkawriter.inbox.dedupe.event-id")
	bySeq := !failpoint.Mutant("kafkawriter.inbox.dedupe.seq")
	fresh, raised = make([]kafka.Message, 0, len(msgs)), map[string]int64{}
	seen := map[string]bool{}
	for i, m := range msgs {
		ev, key := evs[i], string(m.Key)
		if ev.id != "" {
			dup := !claimed[ev.id] || seen[ev.id]
			seen[ev.id] = true
			if dup && byID {
				counts.byID++
				continue
			}
		}
		if ev.seq > 0 {
			if ev.seq <= max(last[key], raised[key]) && bySeq {
				counts.bySeq++
				continue
			}
			raised[key] = max(raised[key], ev.seq)
		}
		fresh = append(fresh, m)
	}
	return fresh, raised, counts
}

// lookup claims ids and reads (and locks) the sequences of keys, in one
// round trip: it returns the IDs claimed, those not recorded before, and
// the keys' highest sequences applied.
func (in *Inbox) lookup(ctx context.Context, c Claim, ids []string, keys [][]byte) (claimed map[string]bool, last map[string]int64, err error) {
	var b pgx.Batch
	b.Queue(in.sql.claimEvents, c.GroupID, c.Topic, ids)
	b.Queue(in.sql.entitySeqs, c.GroupID, c.Topic, keys)
	res := in.db.SendBatch(ctx, &b)
	defer func() {
		if cerr := res.Close(); err == nil {
			err = cerr
		}
	}()
	claimed = make(map[string]bool, len(ids))
	rows, err := res.Query()
	if err != nil {
		return nil, nil, err
	}
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { claimed[id] = true; return nil }); err != nil {
		return nil, nil, err
	}
	last = make(map[string]int64, len(keys))
	if rows, err = res.Query(); err != nil {
		return nil, nil, err
	}
	var key []byte
	var seq int64
	if _, err := pgx.ForEachRow(rows, []any{&key, &seq}, func() error { last[string(key)] = seq; return nil }); err != nil {
		return nil, nil, err
	}
	return claimed, last, nil
}

// readEvent reads m's event headers, refusing malformed ones.
func readEvent(c Claim, m kafka.Message) (eventOf, error) {
	var ev eventOf
	bad := func(format string, args ...any) (eventOf, error) {
		return eventOf{}, fmt.Errorf("%w: message %s/%d@%d: %s", ErrInvalid, short.Quote(c.Topic), c.Partition, m.Offset, fmt.Sprintf(format, args...))
	}
	var gotID, gotSeq bool
	for _, h := range m.Headers {
		switch {
		case h.Key == HeaderEventID && !gotID:
			gotID = true
			if len(h.Value) == 0 || len(h.Value) > 255 || !utf8.Valid(h.Value) || bytes.IndexByte(h.Value, 0) >= 0 {
				return bad("header %s must be 1–255 bytes of UTF-8 without NUL", HeaderEventID)
			}
			ev.id = string(h.Value)
		case h.Key == HeaderEventSeq && !gotSeq:
			gotSeq = true
			v := string(h.Value)
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 || strings.TrimLeft(v, "0123456789") != "" {
				return bad("header %s %s is not a positive decimal integer", HeaderEventSeq, short.Quote(v))
			}
			ev.seq = n
		}
	}
	if ev.seq > 0 && (len(m.Key) == 0 || len(m.Key) > 255) {
		return bad("a message with header %s needs a key of 1–255 bytes, not %d", HeaderEventSeq, len(m.Key))
	}
	return ev, nil
}

// Purge deletes the event IDs that groupID applied from topic more than
// retention ago (by the database's clock), in statements of at most 10,000
// rows, and returns how many it deleted. A copy of an event that arrives
// after its ID was purged is still dropped by its sequence, if it has one;
// a copy with a new sequence (the event written again) is applied again.
// It does not touch the entities' sequences.
func (in *Inbox) Purge(ctx context.Context, groupID, topic string, retention time.Duration) (int64, error) {
	if err := in.usable(); err != nil {
		return 0, err
	}
	if err := validPartition(groupID, topic, 0); err != nil {
		return 0, err
	}
	if retention < 0 {
		return 0, fmt.Errorf("%w: negative retention %v", ErrInvalid, retention)
	}
	var total int64
	for {
		tag, err := in.db.Exec(ctx, in.sql.purgeEvents, groupID, topic, retention.Microseconds(), purgeBatch)
		if err != nil {
			return total, fmt.Errorf("kafkawriter: purge %s: %w", short.Quote(topic), err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < purgeBatch {
			return total, nil
		}
	}
}
