// Package singlewriter gives every entity exactly one writer, so updates to
// it need no lock: in-process actors here, and in package kafkawriter a Kafka
// consumer group whose partition owners commit through a transactional inbox
// in PostgreSQL.
//
// Guarantee: an [Actor] applies its commands one at a time, in submission
// order per submitter, to state no other goroutine touches; a [Group] routes
// each key to one actor by a stable hash, so all commands for one key are
// applied by one goroutine, in order.
//
// What it does NOT protect: an actor's state is single-writer only inside
// one process. Two processes running "the same" actor are two writers; across
// processes use package kafkawriter (one writer per Kafka partition, fenced
// by an epoch in PostgreSQL) or package partition.
//
// This package links neither kafka-go nor pgx: a user of actors pulls in no
// Kafka or database client.
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
	// anything ran.
	ErrInvalid = errors.New("singlewriter: invalid argument")
	// ErrPanic reports a command that panicked; the error is a *PanicError.
	// The actor survives and runs its next command.
	ErrPanic = errors.New("singlewriter: command panicked")
	// ErrGoexit reports a command that called runtime.Goexit (t.FailNow and
	// t.Fatal do) instead of returning. Like a panic, it is contained: the
	// actor goes on with its next command.
	ErrGoexit = errors.New("singlewriter: command called runtime.Goexit")
)

// PanicError is a recovered panic from a command, or from a handler of
// package kafkawriter, which runs user functions on goroutines of its own
// too.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the panicking goroutine's stack, as runtime/debug.Stack formats it
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("singlewriter: command panicked: %v", e.Value)
}

// Is reports whether target is ErrPanic.
func (e *PanicError) Is(target error) bool { return target == ErrPanic }
