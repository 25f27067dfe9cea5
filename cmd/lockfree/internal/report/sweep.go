package report

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lockfree-go/lockfree/internal/short"
)

// Sweep is one scenario run at several sizes (--clients 1,4,16 --keys
// 1,100): a series per approach of ops/s and p99 against clients and
// against keys. It is where a lock collapses on a hot key and where
// optimistic retries stop paying.
type Sweep struct {
	Scenario string     `json:"scenario"`
	Clients  []int      `json:"clients"`
	Keys     []int      `json:"keys"`
	Points   []Point    `json:"points"`
	Order    []Approach `json:"approaches"`
}

// Point is one size of a sweep, summarised per approach. An approach that
// failed at this size is in Failed, not in By: a gap in the sweep, not a
// zero.
type Point struct {
	Clients int                   `json:"clients"`
	Keys    int                   `json:"keys"`
	By      map[Approach]PointSum `json:"by_approach"`
	// Failed says, per approach that failed here, why.
	Failed map[Approach]string `json:"failed,omitempty"`
}

// PointSum is one approach's figures at one point.
type PointSum struct {
	OpsPerSec  float64 `json:"ops_per_sec"`
	P99ms      float64 `json:"p99_ms"`
	Violations *int64  `json:"violations"`
	// RoundTripsPerOp is nil when not measured.
	RoundTripsPerOp *float64 `json:"round_trips_per_op,omitempty"`
}

// Sweeps groups reports by scenario and returns a sweep for each scenario
// that ran at more than one size, in the order the scenarios first appear.
func Sweeps(reps []Report) []Sweep {
	var out []Sweep
	idx := map[string]int{}
	for _, rep := range reps {
		i, ok := idx[rep.Scenario]
		if !ok {
			i = len(out)
			idx[rep.Scenario] = i
			out = append(out, Sweep{Scenario: rep.Scenario})
		}
		s := &out[i]
		p := Point{Clients: rep.Clients, Keys: rep.Keys, By: map[Approach]PointSum{}}
		for _, r := range rep.Results {
			if r.Skipped != "" {
				continue
			}
			if !slices.Contains(s.Order, r.Approach) {
				s.Order = append(s.Order, r.Approach)
			}
			if r.Failed != "" {
				if p.Failed == nil {
					p.Failed = map[Approach]string{}
				}
				p.Failed[r.Approach] = r.Failed
				continue
			}
			sum := PointSum{OpsPerSec: r.OpsPerSec, P99ms: r.P99ms, RoundTripsPerOp: r.RoundTripsPerOp}
			if r.Checked {
				sum.Violations = &r.Violations
			}
			p.By[r.Approach] = sum
		}
		s.Points = append(s.Points, p)
		if !slices.Contains(s.Clients, rep.Clients) {
			s.Clients = append(s.Clients, rep.Clients)
		}
		if !slices.Contains(s.Keys, rep.Keys) {
			s.Keys = append(s.Keys, rep.Keys)
		}
	}
	var sweeps []Sweep
	for _, s := range out {
		if len(s.Points) > 1 {
			slices.Sort(s.Clients)
			slices.Sort(s.Keys)
			sweeps = append(sweeps, s)
		}
	}
	return sweeps
}

// At returns the point at clients and keys.
func (s Sweep) At(clients, keys int) (Point, bool) {
	for _, p := range s.Points {
		if p.Clients == clients && p.Keys == keys {
			return p, true
		}
	}
	return Point{}, false
}

// Failures lists the points at which an approach failed, with why, in
// point order: "redis-lock at 64 clients, 100 keys: REASON".
func (s Sweep) Failures() []string {
	var out []string
	for _, p := range s.Points {
		for _, a := range s.Order {
			if why, ok := p.Failed[a]; ok {
				out = append(out, fmt.Sprintf("%s at %s, %s: %s", a, plural(p.Clients, "client", "clients"), plural(p.Keys, "key", "keys"), why))
			}
		}
	}
	return out
}

// ParseInts parses a comma-separated list of integers within [lo, hi], such
// as "1,4,16,64", in the order given and without repeats.
func ParseInts(s string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(strings.ReplaceAll(f, "_", ""))
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%w: %s is not a number", ErrInvalid, short.Quote(f))
		}
		if n < lo || n > hi {
			return nil, fmt.Errorf("%w: %d is outside %d…%d", ErrInvalid, n, lo, hi)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("%w: %d is listed twice", ErrInvalid, n)
		}
		out = append(out, n)
	}
	return out, nil
}
