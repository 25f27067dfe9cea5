package fencedlock

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// listener wakes a Postgres store's waiters when a lock is released, and its
// watchers when a lock is released or changed, through LISTEN/NOTIFY on two
// channels. It holds one pooled connection LISTENing only while at least
// one waiter or watcher waits: the first starts it, the last one to leave
// stops it and waits for its goroutine to end, so nothing outlives the
// waits. Notifications are a hint: a waiter still polls, so a lost
// connection only makes waiting slower. It is safe for concurrent use.
type listener struct {
	pool     *pgxpool.Pool
	released string   // the channel of releases
	changed  string   // the channel of grants by AcquireValue and of SetValue
	waiters  waitList // Released: woken by releases
	watchers waitList // Changed: woken by releases and changes

	mu     sync.Mutex
	n      int                // registered waiters
	cancel context.CancelFunc // stops the running goroutine; nil when none runs
	done   chan struct{}      // closed when that goroutine has ended
}

// Released implements Wakeups.
func (l *listener) Released(name string) (<-chan struct{}, func()) { return l.join(&l.waiters, name) }

// Changed implements Watcher.
func (l *listener) Changed(name string) (<-chan struct{}, func()) { return l.join(&l.watchers, name) }

// join registers a waiter of name on w, and starts listening if it is the
// first.
func (l *listener) join(w *waitList, name string) (<-chan struct{}, func()) {
	ch, remove := w.add(name)
	l.mu.Lock()
	l.n++
	if l.n == 1 {
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go l.run(ctx, l.done)
	}
	l.mu.Unlock()
	var once sync.Once
	return ch, func() { once.Do(func() { remove(); l.leave() }) }
}

// leave unregisters a waiter; the last one stops the goroutine and waits
// for it.
func (l *listener) leave() {
	l.mu.Lock()
	l.n--
	var done chan struct{}
	if l.n == 0 {
		l.cancel()
		done = l.done
		l.cancel, l.done = nil, nil
	}
	l.mu.Unlock()
	if done != nil {
		<-done
	}
}

// run listens, reconnecting after failures, until ctx ends.
func (l *listener) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		l.listen(ctx)
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

func (l *listener) listen(ctx context.Context) {
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return
	}
	defer func() {
		// The connection is LISTENing: do not give it back to the pool. A
		// bound on the goodbye: the server may be unreachable.
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Hijack().Close(cctx)
	}()
	for _, channel := range []string{l.released, l.changed} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			return
		}
	}
	// Releases and changes that happened before LISTEN took effect were
	// missed: wake everyone once, they re-check.
	l.waiters.wake("")
	l.watchers.wake("")
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return
		}
		if n.Channel == l.released {
			l.waiters.wake(n.Payload)
		}
		l.watchers.wake(n.Payload)
	}
}
