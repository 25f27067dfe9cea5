package idempotency_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
)

// deadlines records the deadline of the contexts of the fenced twin's
// writes: its record and its lock release.
type deadlines struct {
	mu               sync.Mutex
	put, release     time.Time
	putOK, releaseOK bool
}

type recordingRecords struct {
	*idempotency.Memory
	d *deadlines
}

func (r recordingRecords) PutFenced(ctx context.Context, key idempotency.Key, fp idempotency.Fingerprint, token int64, res idempotency.Result) error {
	r.d.mu.Lock()
	r.d.put, r.d.putOK = ctx.Deadline()
	r.d.mu.Unlock()
	return r.Memory.PutFenced(ctx, key, fp, token, res)
}

type recordingLocks struct {
	*fencedlock.Memory
	d *deadlines
}

func (l recordingLocks) Release(ctx context.Context, lease fencedlock.Lease) error {
	l.d.mu.Lock()
	l.d.release, l.d.releaseOK = ctx.Deadline()
	l.d.mu.Unlock()
	return l.Memory.Release(ctx, lease)
}

// ReleaseTimeout bounds the writes after the work: its clock starts when
// the work returns, so a long work does not eat into it.
func TestFencedReleaseTimeoutStartsAfterTheWork(t *testing.T) {
	t.Parallel()
	const writeTimeout = time.Hour
	d := &deadlines{}
	mem, _ := idempotency.NewMemory(nil)
	f, err := idempotency.NewFenced(recordingLocks{memoryLocks(nil), d}, recordingRecords{mem, d},
		&idempotency.FencedConfig{LockerConfig: fencedlock.LockerConfig{TTL: time.Minute, ReleaseTimeout: writeTimeout}})
	if err != nil {
		t.Fatal(err)
	}
	var workEnd time.Time
	_, err = f.Do(ctx, idempotency.Key{ID: "long work"}, idempotency.Fingerprint{}, func(context.Context) (idempotency.Result, error) {
		// The work lasts a while (a condition on the clock, not a bound on
		// anything), so that a clock started before it shows.
		start := time.Now()
		for time.Since(start) < 20*time.Millisecond {
			time.Sleep(time.Millisecond)
		}
		workEnd = time.Now()
		return idempotency.Result{Status: 201}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.putOK || !d.releaseOK {
		t.Fatalf("the writes had no deadline (record %v, release %v)", d.putOK, d.releaseOK)
	}
	if limit := workEnd.Add(writeTimeout); d.put.Before(limit) || d.release.Before(limit) {
		t.Fatalf("the write deadlines (record %v, release %v) were set before the work ended (%v earlier than its end + ReleaseTimeout)",
			d.put, d.release, limit.Sub(d.put))
	}
}
