package clock_test

import (
	"fmt"
	"time"

	"github.com/lockfree-go/lockfree/clock"
)

// A test moves a manual clock instead of sleeping: a memory backend built
// with it (fencedlock.MemoryConfig{Clock: c}, and the like) sees a lease
// expire at once.
func ExampleManual() {
	c := clock.NewManual(time.Time{}) // starts at clock.Epoch
	deadline := c.Now().Add(30 * time.Second)
	c.Advance(31 * time.Second)
	fmt.Println(c.Now().After(deadline), c.Now().Sub(clock.Epoch))
	// Output: true 31s
}
