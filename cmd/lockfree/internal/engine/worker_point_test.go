package engine

import (
	"context"
	"io"
	"testing"
	"time"
)

// A before-write point reached with no operation of the engine — a
// library's own point on the library's context, as a Kafka consumer's after
// the engine's handler returned — does not fire an arm: the coordinator
// could not name the key the worker stopped on, so it could neither hold a
// taker on it nor see it taken over. The arm waits for the next point of an
// operation, and fires there with its key.
func TestPointWithoutOperationDoesNotFire(t *testing.T) {
	pr, pw := io.Pipe()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	t.Cleanup(func() { _ = pw.Close() })
	w := &worker{out: &emitter{w: pw}, haltCh: make(chan struct{})}
	w.armed = &arm{Mode: modeWait}
	fired := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.armed == nil
	}

	done := make(chan struct{})
	go func() { w.point(context.Background(), "kafkawriter.consumer.before-write"); close(done) }()
	for ended := false; !ended && !fired(); {
		select {
		case <-done:
			ended = true
		case <-time.After(time.Millisecond):
		}
	}
	if fired() {
		w.clear()
		<-done
		t.Fatal("the arm fired at a point reached with no operation (its key unknown)")
	}

	ctx := context.WithValue(context.Background(), opKey{}, &Invocation{key: "partition-3", task: "task-0-1"})
	done = make(chan struct{})
	go func() { w.point(ctx, "harness.events.alternative.before-write"); close(done) }()
	for !fired() {
		time.Sleep(time.Millisecond)
	}
	w.clear()
	<-done
}

// An arm fires at the kind of operation point it names (arm.At): an
// in-transaction arm passes a before-write point by, and fires at the
// operation's next in-transaction point, with its key; a before-write arm
// passes an in-transaction point by. Both mark the operation as having
// reached its write.
func TestArmAtItsKindOfPoint(t *testing.T) {
	pr, pw := io.Pipe()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	t.Cleanup(func() { _ = pw.Close() })
	w := &worker{out: &emitter{w: pw}, haltCh: make(chan struct{})}
	armed := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.armed != nil
	}
	for _, tc := range []struct{ at, passed, fires string }{
		{AtInTx, "atomic.fenced.before-write", "atomic.fenced.in-tx"},
		{"", "harness.documents.alternative.delete.in-tx", "harness.documents.alternative.delete.before-write"},
	} {
		op := &Invocation{key: "doc-0", task: "task-0-1"}
		ctx := context.WithValue(context.Background(), opKey{}, op)
		w.armed = &arm{Mode: modeWait, At: tc.at}
		w.point(ctx, tc.passed) // returns at once: not its kind
		if !armed() || !op.passed.Load() {
			t.Fatalf("at %q: %s fired the arm (%v) or did not mark the operation (%v)", tc.at, tc.passed, !armed(), op.passed.Load())
		}
		done := make(chan struct{})
		go func() { w.point(ctx, tc.fires); close(done) }()
		for armed() {
			time.Sleep(time.Millisecond)
		}
		w.clear()
		<-done
	}
}
