package atomic

// Waiting returns how many decrements of key wait for a step (not yet
// sent), so that tests can order arrivals.
func (c *Coalescer) Waiting(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q, ok := c.keys[key]; ok {
		return len(q.waiting)
	}
	return 0
}
