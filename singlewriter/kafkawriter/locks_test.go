package kafkawriter_test

import (
	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
)

// memoryLocks returns a fencedlock.Memory on c (nil: the system clock).
func memoryLocks(c clock.Clock) *fencedlock.Memory {
	m, err := fencedlock.NewMemory(&fencedlock.MemoryConfig{Clock: c})
	if err != nil {
		panic(err)
	}
	return m
}
