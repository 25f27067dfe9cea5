package engine

import "context"

// sqlPlainMint makes the foil's lock schema mint tokens without their era:
// fencedlock's statements call fence_mint, which now returns nextval alone.
const sqlPlainMint = `CREATE OR REPLACE FUNCTION lockfree_fence_mint(seq regclass) RETURNS bigint
	LANGUAGE sql VOLATILE AS $$ SELECT nextval(seq) $$`

// plainTokenLock is the foil of the failover fault (PlainTokenLock): a
// scenario's fenced lock, unchanged, on a lock schema whose tokens come
// from a plain sequence (sqlPlainMint), as fencedlock minted them before
// fence eras. A promoted standby that missed the last WAL hands out tokens
// the old primary already gave away, and the fence lets a stale holder's
// write through. Every scenario the failover fault runs on
// (FailoverTarget) has it; it runs only under that fault.
type plainTokenLock struct{ scenario string }

func init() {
	derive(func(sc Scenario) ApproachDef {
		if _, ok := sc.(FailoverTarget); ok {
			return plainTokenLock{scenario: sc.Name()}
		}
		return nil
	})
}

func (d plainTokenLock) Scenario() string { return d.scenario }
func (plainTokenLock) Approach() Approach { return PlainTokenLock }
func (d plainTokenLock) Label() string {
	return "the fenced lock, its tokens a plain nextval (no fence era): " + d.fenced().Label()
}
func (d plainTokenLock) Protection(p Params) Protection { return d.fenced().Protection(p) }

// FoilOf: its tokens differ from the fenced lock's only across a failover.
func (plainTokenLock) FoilOf() (Fault, string) {
	return Failover, "runs only under the failover fault: its tokens differ from the fenced lock's only across a failover"
}

func (d plainTokenLock) NewClient(ctx context.Context, env *Env) (Client, error) {
	return d.fenced().NewClient(ctx, env)
}

// fenced is the scenario's fenced lock, which the foil runs as it is.
func (d plainTokenLock) fenced() ApproachDef {
	def, ok := lookupApproach(d.scenario, FencedLock)
	if !ok {
		panic("engine: no fenced lock for the foil of scenario " + d.scenario)
	}
	return def
}
