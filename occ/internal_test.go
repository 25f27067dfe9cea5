package occ

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/short"
)

// TestScheduleNeverOverflows walks long schedules: a delay that grows past
// int64 nanoseconds must stay at its ceiling (Cap, or the longest Duration)
// instead of wrapping to zero or below, which would retry with no pause.
func TestScheduleNeverOverflows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		b    Backoff
		max  time.Duration // the longest delay allowed
	}{
		{"capped", Backoff{Duration: time.Millisecond, Factor: 10, Cap: time.Second}, time.Second},
		{"capped with jitter", Backoff{Duration: time.Millisecond, Factor: 10, Cap: time.Second, Jitter: 0.5}, time.Second},
		{"huge factor", Backoff{Duration: time.Nanosecond, Factor: 1e300, Cap: time.Minute}, time.Minute},
		{"uncapped", Backoff{Duration: time.Second, Factor: 2}, math.MaxInt64},
		{"uncapped with jitter", Backoff{Duration: time.Second, Factor: 5, Jitter: 1}, math.MaxInt64},
		{"infinite factor", Backoff{Duration: time.Millisecond, Factor: math.Inf(1), Cap: time.Hour}, time.Hour},
		{"NaN factor and jitter", Backoff{Duration: time.Millisecond, Factor: math.NaN(), Jitter: math.NaN(), Cap: time.Hour}, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSchedule(tt.b)
			prev := time.Duration(0)
			for i := range 200 {
				d := s.next()
				if d <= 0 || d > tt.max {
					t.Fatalf("delay %d = %v, want within (0, %v]", i+1, d, tt.max)
				}
				if tt.b.Jitter == 0 && d < prev {
					t.Fatalf("delay %d = %v shrank from %v", i+1, d, prev)
				}
				prev = d
			}
		})
	}
}

// TestLockNamesAreUnambiguous checks that no key can name the lock of
// another: a long key is hashed, and a key that looks like a hash is hashed
// too rather than colliding with it.
func TestLockNamesAreUnambiguous(t *testing.T) {
	t.Parallel()
	type doc struct {
		ID      string `db:"id"`
		Version int64  `db:"version"`
	}
	s, err := NewMemory[string, doc](nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFenced(memoryLocks(nil), Store[string, doc](s), nil)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", MaxKeyLen)
	hashed := f.lockName(long)
	keys := []string{long, hashed, "short", "sha256:short"}
	seen := map[string]string{}
	for _, k := range keys {
		name := f.prefix + f.lockName(k)
		if len(name) > fencedlock.MaxNameLen {
			t.Errorf("lock name of %s is %d bytes", short.Quote(k), len(name))
		}
		if other, dup := seen[name]; dup {
			t.Errorf("keys %s and %s share lock %s", short.Quote(other), short.Quote(k), short.Quote(name))
		}
		seen[name] = k
	}
	tooLong := &FencedConfig{LockerConfig: fencedlock.LockerConfig{LockPrefix: strings.Repeat("p", maxPrefixLen+1)}}
	if _, err := NewFenced(memoryLocks(nil), Store[string, doc](s), tooLong); !errors.Is(err, ErrInvalid) {
		t.Errorf("a lock prefix leaving no room for a hashed key: %v, want ErrInvalid", err)
	}
}

// Struct keys name their locks with %#v: two keys that %v prints alike get
// different locks.
func TestStructKeyLockNames(t *testing.T) {
	t.Parallel()
	type pair struct{ A, B string }
	type row struct {
		ID      pair  `db:"id"`
		Version int64 `db:"version"`
	}
	s, err := NewMemory[pair, row](nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFenced(memoryLocks(nil), Store[pair, row](s), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := f.lockName(pair{"a b", "c"}), f.lockName(pair{"a", "b c"})
	if a == b {
		t.Fatalf("keys {a b, c} and {a, b c} share lock %s", short.Quote(a))
	}
}

// TestErrorsQuoteKeysShort checks that an error never carries a whole
// user-supplied key or header.
func TestErrorsQuoteKeysShort(t *testing.T) {
	t.Parallel()
	type doc struct {
		ID      string `db:"id"`
		Version int64  `db:"version"`
	}
	s, err := NewMemory[string, doc](nil)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", MaxKeyLen)
	if _, err := s.Insert(context.Background(), doc{ID: long}); err != nil {
		t.Fatal(err)
	}
	_, conflict := s.Insert(context.Background(), doc{ID: long})
	_, _, missing := s.Load(context.Background(), long[1:])
	_, _, invalid := s.Load(context.Background(), long+"k")
	h := http.Header{"If-Match": {strings.Repeat("x", 10000)}}
	_, badHeader := ParseIfMatch(h)
	_, badTag := ParseETag(strings.Repeat("y", 10000))
	for _, err := range []error{conflict, missing, invalid, badHeader, badTag} {
		if err == nil || strings.Contains(err.Error(), long[:short.Max+1]) || len(err.Error()) > 200 {
			t.Errorf("error %q: want a short quote of the input", err)
		}
	}
}
