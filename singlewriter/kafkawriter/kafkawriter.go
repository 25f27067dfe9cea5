// Package kafkawriter applies a Kafka topic's messages to PostgreSQL exactly
// once, in partition order, with one writer per partition: the single writer
// of package singlewriter across processes.
//
// Guarantee: a [Consumer] is a member of a Kafka consumer group; each
// partition's owner runs the user's [Handler] in a transaction that also
// advances the partition's stored offset in the inbox table
// ([Inbox.Advance]):
//
//	UPDATE inbox_offsets SET next_offset = $new
//	WHERE group_id = $g AND topic = $t AND partition = $p
//	  AND next_offset = $expected AND epoch = $myEpoch
//
// and rolls back when that changes no row. A consumer that paused past its
// session timeout (a zombie) and wakes after another member took over its
// partition changes nothing: its transaction fails with [ErrFenced] or
// [ErrStaleOffset]. The epoch is minted in PostgreSQL when a member is
// assigned a partition ([Inbox.Claim]); unlike Kafka's generation ID it never
// restarts, not even when the group is deleted.
//
// What it does NOT protect: effects outside the handler's transaction (an
// e-mail, an HTTP call, a write to another database) happen again when a
// zombie's transaction is rejected or a consumer crashes mid-message; make
// them idempotent. Kafka's own offsets (mirrored with
// [ConsumerConfig.MirrorOffsets], for lag monitoring) are never the source of
// truth. Poison messages sent to the dead-letter topic may be sent twice if
// the consumer crashes between the send and the commit.
//
// The fenced-lock twin, [FencedConsumer], gets the same result the lock-based
// way: competing consumers that apply each entity's messages under the
// entity's fenced lock ([Fenced], built on fencedlock.Locker) and record the
// entity's progress with a write fenced by the lock's token.
//
// A [Producer] keys messages by entity so that one partition, and so one
// writer, holds each entity's messages in order; [CreateTopic] and
// [DeleteTopic] manage topics.
package kafkawriter

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/singlewriter"
)

var (
	// ErrInvalid reports bad input or configuration, detected before
	// anything was written.
	ErrInvalid = errors.New("kafkawriter: invalid argument")
	// ErrFenced reports an inbox write by a consumer that no longer owns
	// the partition: another member claimed it with a higher epoch. The
	// error is a *FencedError and the transaction was rolled back.
	ErrFenced = errors.New("kafkawriter: partition claimed by a newer owner")
	// ErrStaleOffset reports an inbox write whose expected offset is no
	// longer the stored one (the message was already applied). The error is
	// a *StaleOffsetError and the transaction was rolled back.
	ErrStaleOffset = errors.New("kafkawriter: stored offset moved")
	// ErrPoison reports a message that failed every attempt and could not be
	// dead-lettered: no dead-letter topic is configured, or the topic
	// refused the message for good. The error is a *PoisonError.
	ErrPoison = errors.New("kafkawriter: poison message")
	// ErrStopped reports a Start of a consumer that was stopped: a consumer
	// runs once.
	ErrStopped = errors.New("kafkawriter: consumer stopped")
	// ErrUncertain reports a send whose outcome is unknown: the request
	// may have reached the brokers and been written (the connection broke
	// before their answer, or the context ended first). Sending the
	// messages again may write them twice, as records at later offsets
	// that consumers apply again.
	ErrUncertain = errors.New("kafkawriter: send outcome unknown")
	// ErrFenceEra reports a Claim that the database refused to mint an
	// epoch for, because it could be lower than one already handed out: the
	// database moved to a cluster whose WAL timeline is lower than the era
	// it had reached (a restore or an upgrade onto a new cluster). The
	// error is a *FenceError naming the statement an operator runs
	// (fence_advance); it is the same sentinel as fencedlock.ErrFenceEra.
	ErrFenceEra = fence.ErrEra
	// ErrFenceReadOnly reports a Claim on a read-only server: a standby
	// (connect with target_session_attrs=read-write) or a read-only
	// transaction. The error is a *FenceError; it is the same sentinel as
	// fencedlock.ErrFenceReadOnly.
	ErrFenceReadOnly = fence.ErrReadOnly
)

// FenceError is an epoch the database refused to mint: it matches
// ErrFenceEra or ErrFenceReadOnly (its Kind), unwraps to the server's
// *pgconn.PgError, and says what an operator does about it. It is the same
// type as fencedlock.FenceError.
type FenceError = fence.Error

// FencedError is an inbox write rejected because a newer owner claimed the
// partition.
type FencedError struct {
	Topic     string
	Partition int
	Presented int64 // the writer's epoch
	Required  int64 // the epoch stored now: the lowest the inbox still accepts
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("kafkawriter: %s/%d: epoch %d fenced by a newer owner (epoch %d)",
		short.Quote(e.Topic), e.Partition, e.Presented, e.Required)
}

// Is reports whether target is ErrFenced.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// StaleOffsetError is an inbox write whose expected offset is not the stored
// one.
type StaleOffsetError struct {
	Topic     string
	Partition int
	Expected  int64 // the next offset the writer expected
	Actual    int64 // the next offset stored now
}

func (e *StaleOffsetError) Error() string {
	return fmt.Sprintf("kafkawriter: %s/%d: expected next offset %d, stored %d",
		short.Quote(e.Topic), e.Partition, e.Expected, e.Actual)
}

// Is reports whether target is ErrStaleOffset.
func (e *StaleOffsetError) Is(target error) bool { return target == ErrStaleOffset }

// PoisonError is a message that failed all its attempts and was not
// dead-lettered.
type PoisonError struct {
	Topic     string
	Partition int
	Offset    int64
	Attempts  int
	Err       error // the last handler error
	// DeadLetter is why the dead-letter topic refused the message for good
	// (a permanent Kafka error, such as kafka.TopicAuthorizationFailed, or
	// kafka.MessageSizeTooLarge for even the marker), or nil when no
	// dead-letter topic is configured.
	DeadLetter error
}

func (e *PoisonError) Error() string {
	msg := fmt.Sprintf("kafkawriter: poison message %s/%d@%d after %d attempts: %v",
		short.Quote(e.Topic), e.Partition, e.Offset, e.Attempts, e.Err)
	if e.DeadLetter != nil {
		msg += fmt.Sprintf("; the dead-letter topic refused it: %v", e.DeadLetter)
	}
	return msg
}

// Is reports whether target is ErrPoison.
func (e *PoisonError) Is(target error) bool { return target == ErrPoison }

// Unwrap returns the last handler error, and the dead-letter topic's
// refusal if there is one.
func (e *PoisonError) Unwrap() []error {
	if e.DeadLetter == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.DeadLetter}
}

// Source is what a consumer reads: Topic on the cluster at Brokers, as a
// member of the consumer group GroupID. All three are required. They are one
// value rather than three arguments because Topic and GroupID are both
// strings: side by side in a signature, a swap would compile. The zero
// Source is invalid. A Source is a plain value, safe to copy; the consumers
// keep their own copy.
type Source struct {
	// Brokers are the bootstrap addresses.
	Brokers []string
	// Topic is the topic consumed.
	Topic string
	// GroupID is the Kafka consumer group; a Consumer also keys its inbox
	// rows by it.
	GroupID string
}

func (s Source) validate() error {
	if len(s.Brokers) == 0 {
		return fmt.Errorf("%w: no brokers", ErrInvalid)
	}
	if err := validText("group id", s.GroupID); err != nil {
		return err
	}
	return validText("topic", s.Topic)
}

// validText checks a name that becomes a text column of the inbox or
// progress table.
func validText(what, s string) error {
	if s == "" || len(s) > 255 || !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s %s must be 1–255 bytes of UTF-8 without NUL", ErrInvalid, what, short.Quote(s))
	}
	return nil
}

// Handler applies one message inside tx, the transaction that also records
// the message as applied (the inbox's offset, or the fenced twin's
// progress). It must do all its database writes on tx (writes elsewhere are
// not undone when the transaction is rejected), and should return promptly
// when ctx ends. A returned error rolls the transaction back and counts as a
// failed attempt; so do a panic (*singlewriter.PanicError) and
// runtime.Goexit (singlewriter.ErrGoexit), which the handler's own goroutine
// contains.
type Handler func(ctx context.Context, tx pgx.Tx, msg kafka.Message) error

// BatchHandler applies a batch of messages of one partition, in offset
// order, inside tx, the transaction that also records them as applied (the
// inbox's offset; for a FencedConsumer, whose batches are one entity's
// messages, the entity's progress): what a Handler does for one message, for up to
// the configured BatchSize at once, so that it can apply them in fewer round
// trips (one pgx.Batch for all their statements, or one set-based
// statement). msgs is never empty. The same rules hold: all its writes on
// tx; a returned error, a panic or runtime.Goexit rolls the whole batch back.
// A batch that fails is retried one message at a time (msgs of length one),
// so that a poison message is isolated and dead-lettered alone.
type BatchHandler func(ctx context.Context, tx pgx.Tx, msgs []kafka.Message) error

// Stats counts what a consumer did since it was created. Each message is
// counted once, in one of Applied, Skipped, DeadLettered and Duplicates,
// however often Kafka delivered it to this consumer; a message whose COMMIT
// answer was lost counts once too, when the consumer learns that it
// committed (a Consumer: Applied, or Duplicates; a FencedConsumer, which
// finds it applied: Skipped).
type Stats struct {
	Claims       int64 // partitions claimed in the inbox (Consumer: one per assignment)
	Applied      int64 // messages applied and committed
	Transactions int64 // committed handler transactions
	Fenced       int64 // transactions rejected by a fence (a newer partition owner, or a newer lock tenure)
	Failed       int64 // failed handler attempts
	DeadLettered int64 // messages sent to the dead-letter topic and skipped
	Mirrored     int64 // offset commits mirrored to Kafka (Consumer)
	Skipped      int64 // messages found already applied, by another consumer or by a COMMIT whose answer was lost (FencedConsumer)
	Redelivered  int64 // deliveries of messages this consumer had already handled, dropped (FencedConsumer)
	Duplicates   int64 // messages that Dedupe found applied by event ID or sequence, not handled (Consumer with Dedupe)
}

// Headers set on dead-lettered messages, besides the original key, value
// and headers.
const (
	HeaderTopic     = "singlewriter-topic"
	HeaderPartition = "singlewriter-partition"
	HeaderOffset    = "singlewriter-offset"
	HeaderAttempts  = "singlewriter-attempts"
	HeaderError     = "singlewriter-error"
	// HeaderTruncated marks a record sent in place of a dead letter that the
	// topic refused for its size: it has the key and the headers above, but
	// neither the value nor the original headers; its value is the dropped
	// value's length in bytes. The message stays in its own topic, at the
	// offset HeaderOffset names, until retention deletes it.
	HeaderTruncated = "singlewriter-truncated"
)

// handlerError marks an error as the handler's own (counted as an attempt),
// as opposed to the infrastructure's (retried without counting).
type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

func isHandlerError(err error) bool {
	var he *handlerError
	return errors.As(err, &he)
}

// unwrapHandler returns the handler's own error inside err, or err.
func unwrapHandler(err error) error {
	var he *handlerError
	if errors.As(err, &he) {
		return he.err
	}
	return err
}

// callBatch runs h on msgs, contained, and marks its failure as the
// handler's.
func callBatch(ctx context.Context, h BatchHandler, tx pgx.Tx, msgs []kafka.Message) error {
	if err := contain(func() error { return h(ctx, tx, msgs) }); err != nil {
		return &handlerError{err}
	}
	return nil
}

// eachMessage is h as a BatchHandler: h on each message in turn.
func eachMessage(h Handler) BatchHandler {
	return func(ctx context.Context, tx pgx.Tx, msgs []kafka.Message) error {
		for _, m := range msgs {
			if err := h(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	}
}

// contain runs fn, the user's code, and returns its error, a
// *singlewriter.PanicError if it panicked, or singlewriter.ErrGoexit if it
// called runtime.Goexit. fn runs on a goroutine of its own because nothing
// can stop a Goexit from ending the goroutine it runs on: that one ends
// instead of the caller's, which would otherwise leave a consumer silently
// stopped, holding locks.
func contain(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		returned := false
		defer func() {
			if r := recover(); r != nil {
				done <- &singlewriter.PanicError{Value: r, Stack: debug.Stack()}
			} else if !returned {
				done <- singlewriter.ErrGoexit
			}
		}()
		err := fn()
		returned = true
		done <- err
	}()
	return <-done
}
