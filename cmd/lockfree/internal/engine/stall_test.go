package engine

import (
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// The longest stall is the longest span of the window with no completion:
// between two, or from the window's start or to its end; a completion
// outside the window counts at its edge.
func TestLongestStall(t *testing.T) {
	w := window{from: 1000 * ms, to: 5000 * ms}
	for _, tc := range []struct {
		name    string
		returns []history.Time
		want    history.Time
	}{
		{"none: the whole window", nil, 4000 * ms},
		{"between two", []history.Time{3100 * ms, 1100 * ms, 1200 * ms, 4900 * ms}, 1900 * ms},
		{"from the start", []history.Time{3500 * ms, 4000 * ms, 4500 * ms}, 2500 * ms},
		{"to the end", []history.Time{1500 * ms, 2000 * ms}, 3000 * ms},
		{"outside the window, at its edges", []history.Time{500 * ms, 6000 * ms, 3000 * ms}, 2000 * ms},
	} {
		if got := longestStall(tc.returns, w); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
