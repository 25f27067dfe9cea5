// Package short shortens user-supplied text before it goes into an error
// message or a log line, so that a 10 KB key cannot make a 10 KB error.
package short

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Max is how many bytes of a value Quote keeps.
const Max = 64

// Quote returns s quoted like %q; when s is longer than Max bytes it keeps a
// prefix of at most Max bytes (cut on a rune boundary) and says how long s
// was: "abc…" (10240 bytes).
func Quote(s string) string {
	if len(s) <= Max {
		return strconv.Quote(s)
	}
	cut := Max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s (%d bytes)", strconv.Quote(s[:cut]+"…"), len(s))
}
