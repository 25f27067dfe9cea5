package idempotency_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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

// fencedTwin returns a fenced twin on memory stores, and its record store.
func fencedTwin(t *testing.T) (*idempotency.Memory, *idempotency.Fenced) {
	t.Helper()
	records, _ := idempotency.NewMemory(nil)
	f, err := idempotency.NewFenced(memoryLocks(nil), records, nil)
	if err != nil {
		t.Fatal(err)
	}
	return records, f
}

// takeOver is work that, before it ends, lets a newer holder of the key
// stamp the record with a higher token (as a holder that took the key over
// after this one's lease expired does), then reports what it did: the work
// is done, and storing its result will be fenced.
func takeOver(records *idempotency.Memory, key idempotency.Key, fp idempotency.Fingerprint, runs *int) func(context.Context) (idempotency.Result, error) {
	return func(actx context.Context) (idempotency.Result, error) {
		*runs++
		a, ok := idempotency.AttemptFrom(actx)
		if !ok {
			return idempotency.Result{}, errors.New("no attempt in the context")
		}
		if _, err := records.ReadFenced(actx, key, fp, a.Token()+1); err != nil {
			return idempotency.Result{}, err
		}
		return idempotency.Result{Status: 201, Body: []byte("charged")}, nil
	}
}

// A holder whose work is done and whose record alone is fenced must not be
// told what a refused holder is told (fencedlock.ErrFenced: nothing of
// yours happened), or its caller retries the charge.
func TestFencedWorkDoneRecordFenced(t *testing.T) {
	t.Parallel()
	records, f := fencedTwin(t)
	key := idempotency.Key{ID: "charge-1"}
	runs := 0
	_, err := f.Do(ctx, key, payFP, takeOver(records, key, payFP, &runs))
	if runs != 1 || err == nil {
		t.Fatalf("runs %d, err %v: want the work run once and the record's put refused", runs, err)
	}
	if errors.Is(err, fencedlock.ErrFenced) {
		t.Fatalf("Do = %v: matches fencedlock.ErrFenced, which tells the caller nothing happened, but the work was done", err)
	}
	unrecorded, ok := errors.AsType[*idempotency.UnrecordedError](err)
	if !ok || !errors.Is(err, idempotency.ErrUnrecorded) {
		t.Fatalf("Do = %v: want an *UnrecordedError matching ErrUnrecorded", err)
	}
	if unrecorded.Key != key || unrecorded.Result.Status != 201 || string(unrecorded.Result.Body) != "charged" {
		t.Fatalf("UnrecordedError %+v: want the key and the work's result", unrecorded)
	}
	if fenced, ok := errors.AsType[*fencedlock.FencedError](unrecorded.Err); !ok || fenced.Presented != fenced.Required-1 {
		t.Fatalf("Err = %v: want the put's *fencedlock.FencedError", unrecorded.Err)
	}
	// The newer holder's record is untouched: it still runs, under its token.
	if rec, _, _ := records.Lookup(ctx, key); rec.State != idempotency.Running {
		t.Fatalf("record %+v: the stale holder's result was stored", rec)
	}
}

// The foil: a holder fenced before its work runs is refused, with
// fencedlock.ErrFenced, and its work does not run.
func TestFencedRefusedBeforeWork(t *testing.T) {
	t.Parallel()
	records, f := fencedTwin(t)
	key := idempotency.Key{ID: "charge-2"}
	if _, err := records.ReadFenced(ctx, key, payFP, 1<<60); err != nil {
		t.Fatal(err)
	}
	runs := 0
	_, err := f.Do(ctx, key, payFP, takeOver(records, key, payFP, &runs))
	if runs != 0 || !errors.Is(err, fencedlock.ErrFenced) {
		t.Fatalf("runs %d, err %v: want the holder refused before its work, with fencedlock.ErrFenced", runs, err)
	}
}

// Behind the middleware, the client of a request whose work was done gets
// the handler's response, not a problem that invites a retry.
func TestFencedMiddlewareWorkDoneRecordFenced(t *testing.T) {
	t.Parallel()
	records, f := fencedTwin(t)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := idempotency.AttemptFrom(r.Context())
		if !ok {
			http.Error(w, "no attempt in the context", http.StatusInternalServerError)
			return
		}
		// A newer holder takes the key over while the handler works.
		if _, err := records.ReadFenced(r.Context(), a.Key(), idempotency.Fingerprint{}, a.Token()+1); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	})
	mw, err := idempotency.NewMiddleware(f, handler, &idempotency.MiddlewareConfig{GlobalScope: true})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"amount":100}`))
	req.Header.Set(idempotency.HeaderKey, `"charge-3"`)
	rec := httptest.NewRecorder()
	mw.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated || rec.Body.String() != "charged" {
		t.Fatalf("response %d %q: want the handler's 201 \"charged\"", rec.Code, rec.Body.String())
	}
}

// unreachableRelease is a lock service whose release is never answered.
type unreachableRelease struct{ *fencedlock.Memory }

func (unreachableRelease) Release(context.Context, fencedlock.Lease) error {
	return errors.New("lock service unreachable")
}

// Once fn's result is stored, the key is spent: a release that fails after
// it only delays the next holder until the lease expires, and Do returning
// the release's error would tell the caller (the middleware: a 500, "retry")
// that finished work failed. Before the fix Do returned that error and no
// result.
func TestFencedFailedReleaseAfterStore(t *testing.T) {
	t.Parallel()
	mem, _ := idempotency.NewMemory(nil)
	f, err := idempotency.NewFenced(unreachableRelease{memoryLocks(nil)}, mem,
		&idempotency.FencedConfig{LockerConfig: fencedlock.LockerConfig{TTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	key := idempotency.Key{ID: "charge-1"}
	ran := 0
	res, err := f.Do(ctx, key, payFP, func(context.Context) (idempotency.Result, error) {
		ran++
		return idempotency.Result{Status: 201, Body: []byte("charged")}, nil
	})
	if err != nil || ran != 1 || string(res.Body) != "charged" {
		t.Fatalf("Do = %+v, %v after fn ran %d time(s); want its result, nil", res, err, ran)
	}
}
