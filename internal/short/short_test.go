package short_test

import (
	"strings"
	"testing"

	"github.com/lockfree-go/lockfree/internal/short"
)

func TestQuote(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"", `""`},
		{"order-42", `"order-42"`},
		{strings.Repeat("a", short.Max), `"` + strings.Repeat("a", short.Max) + `"`},
		{strings.Repeat("a", 10240), `"` + strings.Repeat("a", short.Max) + `…" (10240 bytes)`},
		// A multi-byte rune straddling the cut is dropped whole.
		{strings.Repeat("a", short.Max-1) + "é" + "tail", `"` + strings.Repeat("a", short.Max-1) + `…" (` + "69" + ` bytes)`},
	}
	for _, c := range cases {
		if got := short.Quote(c.in); got != c.want {
			t.Errorf("Quote(%.20q…) = %s, want %s", c.in, got, c.want)
		}
	}
}
