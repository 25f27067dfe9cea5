package atomic

// Waiting returns how many operations wait for a step (not yet sent), so
// that tests can order arrivals.
func (c *Coalescer) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}
