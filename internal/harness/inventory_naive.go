package harness

import "context"

// inventoryNaive is the fenced twin without its fence: the same lock, the
// same read and write, no token at the row. A holder that pauses past its
// lease writes a stock computed from what it read before another holder
// sold: a lost sale.
type inventoryNaive struct{}

func init() { RegisterApproach(inventoryNaive{}) }

func (inventoryNaive) Scenario() string   { return "inventory" }
func (inventoryNaive) Approach() Approach { return NaiveLock }
func (inventoryNaive) Label() string {
	return "lease lock: lock SKU → read → check → unfenced write → release"
}
func (inventoryNaive) Protection(p Params) Protection {
	return Protection{Lease: p.LeaseTTL, What: "the lock TTL"}
}

func (inventoryNaive) NewClient(_ context.Context, env *Env) (Client, error) {
	return newInventoryLocked(env, true)
}
