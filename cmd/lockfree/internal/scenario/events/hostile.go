package events

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"
)

// hostility is what kind of event an event is, decided by its entity and
// sequence number alone (hostileKind): every worker and the check agree on
// it without being told, and a run's mix is the same whatever its timing.
type hostility uint8

const (
	wellBehaved hostility = iota
	// transient: its handler fails on the first attempt in a process and
	// succeeds on the next; in a batch, the batch fails and is retried one
	// message at a time.
	transient
	// poison: its handler never succeeds; it must be dead-lettered once
	// and never applied.
	poison
	// big: a value near the broker's record limit (bigValue bytes),
	// applied like any other.
	big
	// bigPoison: a poison event of bigPoisonValue bytes, whose dead letter
	// (with the dead-letter headers) is over the broker's limit: the
	// consumer sends a marker without the value instead.
	bigPoison
	// oversized: a value over the producer's limit (1 MiB): the produce is
	// refused before anything is sent, and none of its events exists.
	oversized
	// unsendable: a poison event whose reason is so long (errPoisonLong)
	// that even its marker is over the dead-letter topic's limit
	// (deadLetterLimit): the topic refuses it for good, and the consumer
	// must stop with it (kafkawriter: a *PoisonError), not retry it for
	// ever. The approach then parks it in the dead_letters table, moves past
	// it, and starts again.
	unsendable
)

func (h hostility) String() string {
	return [...]string{"well-behaved", "transient", "poison", "big", "big poison", "oversized", "unsendable"}[h]
}

// poisoned reports whether an event of kind h must be dead-lettered.
func (h hostility) poisoned() bool { return h == poison || h == bigPoison || h == unsendable }

// hostileEvery is how many events in all carry one hostile event: 1 in 40,
// fixed by (entity, seq), so that every approach's run carries the same
// share and its throughput stays comparable.
const hostileEvery = 40

// Value sizes of the big events. bigValue is applied; bigPoisonValue is
// poison whose dead letter, with its headers and its long reason, is over
// the broker's default message.max.bytes (1 048 588): kafkawriter sends a
// marker in its place (HeaderTruncated). oversizedValue is over kafka-go's
// writer limit (1 MiB), so the producer refuses it before sending.
const (
	bigValue       = 1_000_000
	bigPoisonValue = 1_048_000
	oversizedValue = 1_100_000
)

// hostileKind is the kind of event seq of entity. Only events that are not
// the last of their produce (seq mod eventsPerOp ≠ 0) are hostile: the last
// event a worker was acknowledged is then always one that is applied, and
// its Drain, which waits for it, waits for every poison event before it to
// be dead-lettered too.
func hostileKind(entity string, seq int64) hostility {
	if seq%eventsPerOp == 0 {
		return wellBehaved
	}
	h := fnv.New64a()
	h.Write([]byte(entity))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(seq, 10)))
	n := h.Sum64()
	// 1 in 32 of the 4 in 5 events that may be: 1 in 40 of all.
	const among = hostileEvery * (eventsPerOp - 1) / eventsPerOp
	if n%among != 0 {
		return wellBehaved
	}
	// Of the hostile ones: 1 in 64 unsendable, rare because each stops a
	// kafkawriter consumer, whose restart moves every partition of the
	// group; of the others, 3 transient, 2 poison, 1 big, 1 big poison, 1
	// oversized in 8.
	if (n/among)%64 == 0 {
		return unsendable
	}
	return [...]hostility{transient, transient, transient, poison, poison, big, bigPoison, oversized}[(n/among)%8]
}

// padding returns the value padding of an event of kind h: "" for most,
// dots up to its size for the big ones.
func padding(h hostility, size int) string {
	var want int
	switch h {
	case big:
		want = bigValue
	case bigPoison:
		want = bigPoisonValue
	case oversized:
		want = oversizedValue
	default:
		return ""
	}
	return strings.Repeat(".", max(want-size-1, 1))
}

// errPoison is a poison event's handler error; errTransient a transient
// event's first. errPoisonBig is a big poison event's, whose reason is long
// (a parse error that quotes its input), as a real one's may be: with it,
// the dead letter of a value near the limit is over it.
var (
	errPoison     = errors.New("harness: events: a poison event: its handler never succeeds")
	errPoisonBig  = fmt.Errorf("harness: events: a big poison event: cannot parse %s", strings.Repeat("r", 1000))
	errTransient  = errors.New("harness: events: a transient failure: the next attempt succeeds")
	errPoisonLong = fmt.Errorf("harness: events: an unsendable poison event: cannot parse %s", strings.Repeat("u", 4096))
)

// deadLetterLimit is the dead-letter topic's record limit
// (max.message.bytes): 2 KiB, enough for a poison event's dead letter and
// a big one's marker (its reason truncated to 1000 bytes), too little for
// an unsendable one's marker, whose reason kafkawriter keeps up to 4096
// bytes.
const deadLetterLimit = 2048

// handlerFaults is a process's memory of the transient events it has tried:
// each fails its first attempt in the process and succeeds after. The zero
// value is ready; it is safe for concurrent use.
type handlerFaults struct {
	mu    sync.Mutex
	tried map[string]bool
}

// fail returns the handler error of event e's attempt, nil when the
// attempt may apply it: a poison event always fails, a transient one the
// first time this process tries it.
func (f *handlerFaults) fail(e pendingEvent) error {
	switch hostileKind(e.entity, e.seq) {
	case poison:
		return fmt.Errorf("%w (event %d of %s)", errPoison, e.seq, e.entity)
	case bigPoison:
		return errPoisonBig
	case unsendable:
		return errPoisonLong
	case transient:
		f.mu.Lock()
		defer f.mu.Unlock()
		k := e.entity + " " + strconv.FormatInt(e.seq, 10)
		if f.tried[k] {
			return nil
		}
		if f.tried == nil {
			f.tried = map[string]bool{}
		}
		f.tried[k] = true
		return fmt.Errorf("%w (event %d of %s)", errTransient, e.seq, e.entity)
	}
	return nil
}

// failAny returns the first handler error among events, each attempted:
// every transient event of a failing batch counts its attempt.
func (f *handlerFaults) failAny(events []pendingEvent) error {
	var first error
	for _, e := range events {
		if err := f.fail(e); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// maxAttempts is how often every approach tries an event before it
// dead-letters it; retryBackoff the first delay between attempts (the
// consumers double it).
const (
	maxAttempts  = 3
	retryBackoff = 5 * time.Millisecond
)
