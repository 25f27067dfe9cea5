package lockfreetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// Outcome is what became of an operation.
type Outcome = history.Outcome

// The outcomes of an operation.
const (
	// OK: Op returned no error; Output is its answer.
	OK = history.OK
	// Fail: Op certainly did nothing (one of Test.Refusals, or an error
	// before anything reached the server).
	Fail = history.Fail
	// Unknown: Op may or may not have taken effect (a lost answer, a
	// timeout, a worker killed mid-way).
	Unknown = history.Unknown
)

// Op is one operation of a run's history.
type Op[I, O any] struct {
	// ID names it: "worker/sequence".
	ID     string
	Worker int
	Key    string
	Input  I
	// Output is Op's answer when Outcome is OK.
	Output  O
	Outcome Outcome
	// Err is Op's error, when it returned one.
	Err string
	// Call and Return are when it was called and returned, from the
	// run's first call; Return is -1 for an Unknown outcome.
	Call, Return time.Duration
}

// History is every operation of a run, warm-up included, by call time.
type History[I, O any] []Op[I, O]

// Count counts the operations with outcome o; with key set, of that key
// alone.
func (h History[I, O]) Count(o Outcome, key string) int {
	n := 0
	for _, op := range h {
		if op.Outcome == o && (key == "" || op.Key == key) {
			n++
		}
	}
	return n
}

// Result is the Output a Model's Step sees: Op's answer, or none when the
// answer was lost (Unknown: the operation may have applied, or not).
type Result[O any] struct {
	Value   O
	Unknown bool
}

// typed is a Test behind the runner interface.
type typed[I, O any] struct {
	test *Test[I, O]
	// found and last are what the run's check found and the history it
	// held (in the coordinator).
	found *history.Findings
	last  History[I, O]
}

func (r *typed[I, O]) keyNames(n int) []string { return keyNames(n) }

func (r *typed[I, O]) label() string {
	return r.test.name() + ": your operation, checked by your invariants"
}

func (r *typed[I, O]) lease() engine.Protection {
	if r.test.Lease == 0 {
		return engine.Protection{}
	}
	return engine.Protection{Lease: r.test.Lease, What: "Test.Lease"}
}

func (r *typed[I, O]) init(ctx context.Context, db *pgxpool.Pool, keys []string) error {
	if r.test.Init == nil {
		return nil
	}
	return r.test.Init(ctx, db, keys)
}

func (r *typed[I, O]) op(ctx context.Context, env *engine.Env, key string) error {
	var in I
	if r.test.Input != nil {
		in = r.test.Input(env.Rand, key)
	}
	ctx, op, err := env.Invoke(ctx, key, kindOp, in)
	if err != nil {
		return err
	}
	// The code under test may write before any Point: every error is
	// judged by what it says (history.Classify), not by where it came.
	op.ReachedWrite()
	out, err := r.test.Op(ctx, &Worker{ID: env.Client, DB: env.DB}, key, in)
	return op.Finish(out, err, r.test.Refusals...)
}

func (r *typed[I, O]) check(ctx context.Context, db *pgxpool.Pool, ops []history.Op) (*history.Findings, error) {
	h, err := r.history(ops)
	if err != nil {
		return nil, err
	}
	inv, err := history.NewInvariant("lockfreetest", ops, nil, kindOp)
	if err != nil {
		return nil, err
	}
	if r.test.Check != nil {
		for _, e := range split(r.test.Check(ctx, db, h)) {
			inv.Add(checkKey, history.Violation{Anomaly: "invariant", Text: e.Error()})
		}
	}
	if r.test.Model != nil {
		vs, err := r.linearizable(ctx, h)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			inv.Add(v.Key, v)
		}
	}
	r.found, r.last = inv.Findings(), h
	return r.found, nil
}

// checkKey is where the violations Check returns are filed: they are the
// run's, not one key's.
const checkKey = "(check)"

// split lists the errors err joins (errors.Join), or err alone.
func split(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, split(e)...)
		}
		return out
	}
	return []error{err}
}

// history decodes the engine's history into the Test's types.
func (r *typed[I, O]) history(ops []history.Op) (History[I, O], error) {
	h := make(History[I, O], 0, len(ops))
	var base history.Time
	for i, op := range ops {
		if i == 0 || op.Call < base {
			base = op.Call
		}
	}
	for _, op := range ops {
		o := Op[I, O]{ID: op.ID(), Worker: op.Client, Key: op.Key, Outcome: op.Outcome, Err: op.Meta["error"],
			Call: time.Duration(op.Call - base), Return: -1}
		if op.Outcome != Unknown {
			o.Return = time.Duration(op.Return - base)
		}
		if len(op.Input) > 0 {
			if err := json.Unmarshal(op.Input, &o.Input); err != nil {
				return nil, fmt.Errorf("lockfreetest: operation %s: decoding its input: %w", op.ID(), err)
			}
		}
		if op.Outcome == OK && len(op.Output) > 0 {
			if err := json.Unmarshal(op.Output, &o.Output); err != nil {
				return nil, fmt.Errorf("lockfreetest: operation %s: decoding its output: %w", op.ID(), err)
			}
		}
		h = append(h, o)
	}
	slices.SortStableFunc(h, func(a, b Op[I, O]) int { return int(a.Call - b.Call) })
	return h, nil
}

// linearizable holds each key's operations to the Model (porcupine): the
// failed ones are left out, one of unknown outcome returns after every
// other operation, so that it may take effect at any time after its call.
// A search that runs out of time is an error: nothing is reported checked
// that was not.
func (r *typed[I, O]) linearizable(ctx context.Context, h History[I, O]) ([]history.Violation, error) {
	byKey := map[string][]porcupine.Operation{}
	var end int64
	for _, op := range h {
		end = max(end, int64(op.Call), int64(op.Return))
	}
	for _, op := range h {
		if op.Outcome == Fail {
			continue
		}
		p := porcupine.Operation{ClientId: op.Worker, Input: op.Input, Call: int64(op.Call), Return: int64(op.Return),
			Output: Result[O]{Value: op.Output}}
		if op.Outcome == Unknown {
			p.Return, p.Output = end+1, Result[O]{Unknown: true}
		}
		byKey[op.Key] = append(byKey[op.Key], p)
	}
	var out []history.Violation
	for _, key := range sortedKeys(byKey) {
		if ctx.Err() != nil {
			break
		}
		res, _ := porcupine.CheckOperationsVerbose(*r.test.Model, byKey[key], history.DefaultTimeout)
		switch res {
		case porcupine.Illegal:
			out = append(out, history.Violation{Key: key, Anomaly: history.NotLinearizable,
				Text: fmt.Sprintf("key %s: no order of its %d operations fits the model", key, len(byKey[key]))})
		case porcupine.Unknown:
			return nil, fmt.Errorf("lockfreetest: key %s: the model's search of %d operations ran out of time (%s)",
				key, len(byKey[key]), history.DefaultTimeout)
		}
	}
	return out, ctx.Err()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
