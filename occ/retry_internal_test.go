package occ

import (
	"math"
	"testing"
	"time"
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
