// Package singlewriter gives every entity exactly one writer, so updates to it
// need no lock: in-process actors, and a Kafka consumer group whose partition
// owners commit through a transactional inbox in PostgreSQL.
//
// Guarantee: an [Actor] applies its commands one at a time, in submission
// order per submitter, to state no other goroutine touches; a [Group] routes
// each key to one actor. A [Consumer] applies every Kafka message of its topic
// exactly once to PostgreSQL, in partition order: the user's handler runs in a
// transaction that also advances the partition's stored offset with
//
//	UPDATE inbox_offsets SET next_offset = $new
//	WHERE group_id = $g AND topic = $t AND partition = $p
//	  AND next_offset = $expected AND epoch = $myEpoch
//
// and rolls back when that changes no row, so a consumer that paused past its
// session timeout (a zombie) and wakes after another member took over its
// partition changes nothing: its transaction fails with [ErrFenced] or
// [ErrStaleOffset]. The epoch is minted in PostgreSQL when a member is
// assigned a partition; unlike Kafka's generation ID it never restarts, not
// even when the group is deleted.
//
// What it does NOT protect: effects outside the handler's transaction (an
// e-mail, an HTTP call, a write to another database) happen again when a
// zombie's transaction is rejected or a consumer crashes mid-message; make
// them idempotent. An actor's state is single-writer only inside one process:
// two processes running the same actor are two writers. Kafka's own offsets
// (mirrored with [ConsumerConfig.MirrorOffsets], for lag monitoring) are never
// the source of truth. Poison messages sent to the dead-letter topic may be
// sent twice if the consumer crashes between the send and the commit.
//
// The fenced-lock twin of the Kafka consumer, [FencedConsumer], shows the
// lock-based way to get the same result: competing consumers that take a
// per-entity fenced lock (package fencedlock) around each message.
package singlewriter

import (
	"errors"
	"fmt"
)

var (
	// ErrStopped reports a command submitted to an actor or group that is
	// stopping or stopped; the command did not run.
	ErrStopped = errors.New("singlewriter: stopped")
	// ErrInvalid reports bad input or configuration, detected before
	// anything was written.
	ErrInvalid = errors.New("singlewriter: invalid argument")
	// ErrPanic reports a command or handler that panicked; the error is a
	// *PanicError. The actor survives and runs its next command.
	ErrPanic = errors.New("singlewriter: command panicked")
	// ErrGoexit reports a command or handler that called runtime.Goexit
	// (t.FailNow and t.Fatal do) instead of returning. Like a panic, it is
	// contained: an actor goes on with its next command, a consumer counts
	// a failed attempt.
	ErrGoexit = errors.New("singlewriter: command called runtime.Goexit")
	// ErrFenced reports an inbox write by a consumer that no longer owns
	// the partition: another member claimed it with a higher epoch. The
	// error is a *FencedError and the transaction was rolled back.
	ErrFenced = errors.New("singlewriter: partition claimed by a newer owner")
	// ErrStaleOffset reports an inbox write whose expected offset is no
	// longer the stored one (the message was already applied). The error is
	// a *StaleOffsetError and the transaction was rolled back.
	ErrStaleOffset = errors.New("singlewriter: stored offset moved")
	// ErrPoison reports a message that failed every attempt and could not be
	// dead-lettered (no dead-letter topic configured); the error is a
	// *PoisonError.
	ErrPoison = errors.New("singlewriter: poison message")
)

// PanicError is a recovered panic from a command or handler.
type PanicError struct {
	Value any // the value passed to panic
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("singlewriter: command panicked: %v", e.Value)
}

// Is reports whether target is ErrPanic.
func (e *PanicError) Is(target error) bool { return target == ErrPanic }

// FencedError is an inbox write rejected because a newer owner claimed the
// partition.
type FencedError struct {
	Topic     string
	Partition int
	Presented int64 // the writer's epoch
	Current   int64 // the epoch stored now
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("singlewriter: %s/%d: epoch %d fenced by newer owner (epoch %d)", e.Topic, e.Partition, e.Presented, e.Current)
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
	return fmt.Sprintf("singlewriter: %s/%d: expected next offset %d, stored %d", e.Topic, e.Partition, e.Expected, e.Actual)
}

// Is reports whether target is ErrStaleOffset.
func (e *StaleOffsetError) Is(target error) bool { return target == ErrStaleOffset }

// PoisonError is a message that failed all its attempts.
type PoisonError struct {
	Topic     string
	Partition int
	Offset    int64
	Attempts  int
	Err       error // the last handler error
}

func (e *PoisonError) Error() string {
	return fmt.Sprintf("singlewriter: poison message %s/%d@%d after %d attempts: %v", e.Topic, e.Partition, e.Offset, e.Attempts, e.Err)
}

// Is reports whether target is ErrPoison.
func (e *PoisonError) Is(target error) bool { return target == ErrPoison }

// Unwrap returns the last handler error.
func (e *PoisonError) Unwrap() error { return e.Err }
