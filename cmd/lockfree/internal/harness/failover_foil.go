package harness

import "context"

// PlainTokenLock is the foil of the failover fault: the fenced lock with its
// tokens minted by a plain nextval, as fencedlock minted them before fence
// eras. It runs only under the failover fault.
const PlainTokenLock Approach = "plain-token-lock"

// sqlPlainMint makes the foil's lock schema mint tokens without their era:
// fencedlock's statements call fence_mint, which now returns nextval alone.
const sqlPlainMint = `CREATE OR REPLACE FUNCTION lockfree_fence_mint(seq regclass) RETURNS bigint
	LANGUAGE sql VOLATILE AS $$ SELECT nextval(seq) $$`

// plainTokenLock is a scenario's fenced lock, unchanged, on a lock schema
// whose tokens come from a plain sequence (sqlPlainMint): a promoted standby
// that missed the last WAL hands out tokens the old primary already gave
// away, and the fence lets a stale holder's write through.
type plainTokenLock struct{ scenario string }

func init() {
	for _, s := range failoverScenarios {
		RegisterApproach(plainTokenLock{scenario: s})
	}
}

func (d plainTokenLock) Scenario() string { return d.scenario }
func (plainTokenLock) Approach() Approach { return PlainTokenLock }
func (d plainTokenLock) Label() string {
	return "the fenced lock, its tokens a plain nextval (no fence era): " + d.fenced().Label()
}
func (d plainTokenLock) Protection(p Params) Protection { return d.fenced().Protection(p) }

func (d plainTokenLock) NewClient(ctx context.Context, env *Env) (Client, error) {
	return d.fenced().NewClient(ctx, env)
}

// fenced is the scenario's fenced lock, which the foil runs as it is.
func (d plainTokenLock) fenced() ApproachDef {
	def, ok := lookupApproach(d.scenario, FencedLock)
	if !ok {
		panic("harness: no fenced lock for the foil of scenario " + d.scenario)
	}
	return def
}
