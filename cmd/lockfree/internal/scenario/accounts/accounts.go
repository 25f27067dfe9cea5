package accounts

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/partition"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// The accounts tables. account_events has no unique constraint on
// (account, seq) on purpose: a duplicate or a gap must reach the check, not
// be refused by the table; appended_by is the ID of the operation that
// appended. An append fenced by a partition's epoch also records the epoch
// it presented and the partition's epoch when it was written (in the same
// statement): they differ only for a write a stale owner made.
const (
	sqlAccountsTables = `CREATE TABLE accounts (
	id            text   PRIMARY KEY,
	last_seq      bigint NOT NULL DEFAULT 0,
	fencing_token bigint NOT NULL DEFAULT 0
);
CREATE TABLE account_events (
	account     text   NOT NULL,
	seq         bigint NOT NULL,
	appended_by text   NOT NULL,
	epoch       bigint,
	owner_epoch bigint
)`
	sqlAccountsSeed = `INSERT INTO accounts (id) SELECT 'account-' || i FROM generate_series(0, $1 - 1) AS i`
	sqlAccountsLog  = `SELECT account, seq, appended_by FROM account_events`
	// sqlAccountsStale lists the appends written under an epoch that was
	// not the partition's.
	sqlAccountsStale = `SELECT account, seq, appended_by, epoch, owner_epoch FROM account_events
	WHERE epoch IS DISTINCT FROM owner_epoch ORDER BY account, seq`
	// sqlAccountsRead is the plain read of an entity's last number.
	sqlAccountsRead = `SELECT last_seq FROM accounts WHERE id = $1`
)

// accounts is the scenario of entities whose event logs clients append the
// next sequence number to: the logs found after the run are held to
// Sequences — per entity no number twice, none missing, every number a
// client was told in the log — and no append may carry a stale epoch.
type accounts struct{}

func init() { engine.Register(accounts{}) }

func (accounts) Name() string { return "accounts" }
func (accounts) Order() int   { return 4 }
func (accounts) Description() string {
	return "clients append the next sequence number to an entity's event log; per entity, no gap, no duplicate, every acknowledged number in the log, no append by a stale owner"
}

// Harm is what a violation of the scenario is, in its verdicts' words.
func (accounts) Harm() engine.Harm {
	return engine.Harm{One: "sequence number", Many: "sequence numbers", Bad: "got %s wrong (gaps, duplicates, lost appends)", None: "got none wrong"}
}
func (accounts) Migrations() []migrate.Migration { return partition.Migrations() }

// FailoverVictim: the failover fault runs on accounts, whose clients, on
// one key, write the victim's row in every operation: any key will do.
func (accounts) FailoverVictim() string { return "" }

func (accounts) Setup(ctx context.Context, db *pgxpool.Pool, s engine.Sizes) error {
	if _, err := db.Exec(ctx, sqlAccountsTables+";\n"+sqlAccountsStallsTable); err != nil {
		return err
	}
	_, err := db.Exec(ctx, sqlAccountsSeed, s.Keys)
	return err
}

func (accounts) Check(ctx context.Context, db *pgxpool.Pool, ops []history.Op, _ engine.Sizes) (*history.Findings, error) {
	rows, err := db.Query(ctx, sqlAccountsLog)
	if err != nil {
		return nil, err
	}
	var log []history.Effect
	var e history.Effect
	if _, err := pgx.ForEachRow(rows, []any{&e.Key, &e.Seq, &e.By}, func() error {
		log = append(log, e)
		return nil
	}); err != nil {
		return nil, err
	}
	rep, err := Sequences(ops, log)
	if err != nil {
		return nil, err
	}
	misreportedConflicts(ops, log, rep)
	if err := stalls(ctx, db, rep); err != nil {
		return nil, err
	}
	return rep, staleOwners(ctx, db, ops, rep)
}

// metaFollows, on an append refused because the entity's last number was
// no longer the one it read (errStaleSeq), is that number: the refusal
// claims that the next one had been taken before it came back.
const metaFollows = "follows"

// metaWriteSent is when an append's first write was sent (a history
// time): nothing it wrote committed before.
const metaWriteSent = "write-sent"

// misreportedConflict is an append refused for a number taken meanwhile
// when no append had taken it yet: its refusal had another cause (a stale
// epoch) that the client was not told.
const misreportedConflict history.Anomaly = "misreported conflict"

// misreportedConflicts adds to rep a violation for each append refused for
// a changed number (metaFollows n) when no append of n+1 to its entity had
// sent its write (or, if it did not note when, begun) before the refusal
// came back: the number was still n when the refused write ran, so it was
// refused for another reason.
func misreportedConflicts(ops []history.Op, log []history.Effect, rep *history.Findings) {
	wrote := map[string]history.Time{} // the earliest its effect can have committed
	for _, op := range ops {
		wrote[op.ID()] = op.Call
		if t, err := strconv.ParseInt(op.Meta[metaWriteSent], 10, 64); err == nil {
			wrote[op.ID()] = max(op.Call, history.Time(t))
		}
	}
	takers := map[string]map[int64][]string{} // key → number → appended by
	for _, e := range log {
		if takers[e.Key] == nil {
			takers[e.Key] = map[int64][]string{}
		}
		takers[e.Key][e.Seq] = append(takers[e.Key][e.Seq], e.By)
	}
	for _, op := range ops {
		n, err := strconv.ParseInt(op.Meta[metaFollows], 10, 64)
		if op.Outcome != history.Fail || err != nil {
			continue
		}
		taken := false
		for _, by := range takers[op.Key][n+1] {
			if t, ok := wrote[by]; !ok || t < op.Return {
				taken = true // before the refusal, or by no operation known: not judged
			}
		}
		if taken {
			continue
		}
		v := history.Violation{Key: op.Key, Anomaly: misreportedConflict, Marks: []history.Mark{{Op: op, Role: history.Culprit}},
			Text: fmt.Sprintf("append %s to %s was refused as if number %d had been taken since it read %d, but no append of %d had sent its write before the refusal",
				op.ID(), op.Key, n+1, n, n+1)}
		rep.Add(v)
	}
}

// staleOwner is an append written by a partition's stale owner: under an
// epoch that was no longer the partition's. The sequence checks cannot see
// it when the write happened to follow the right number.
const staleOwner history.Anomaly = "stale owner"

// staleOwners adds to rep a violation for each append a stale owner wrote:
// the single writer's guarantee, checked directly, not only through its
// effect on the sequences.
func staleOwners(ctx context.Context, db *pgxpool.Pool, ops []history.Op, rep *history.Findings) error {
	rows, err := db.Query(ctx, sqlAccountsStale)
	if err != nil {
		return err
	}
	byID := map[string]history.Op{}
	for _, op := range ops {
		byID[op.ID()] = op
	}
	var key, by string
	var seq int64
	var epoch, owner *int64
	_, err = pgx.ForEachRow(rows, []any{&key, &seq, &by, &epoch, &owner}, func() error {
		v := history.Violation{Key: key, Anomaly: staleOwner, Text: fmt.Sprintf(
			"number %d of %s was appended under epoch %s while the partition's epoch was %s", seq, key, epochText(epoch), epochText(owner))}
		if op, ok := byID[by]; ok {
			v.Marks = []history.Mark{{Op: op, Role: history.Culprit}}
		}
		rep.Add(v)
		return nil
	})
	return err
}

func epochText(e *int64) string {
	if e == nil {
		return "none"
	}
	return strconv.FormatInt(*e, 10)
}

// accountAppend starts a client's append to key.
func accountAppend(ctx context.Context, env *engine.Env, key string) (context.Context, *engine.Invocation, error) {
	return env.Invoke(ctx, key, KindAppend, nil)
}

// accountKey picks the entity of a client's next append: the one a taker
// is sent to (engine.Env.Directed), or one at random.
func accountKey(env *engine.Env) string {
	k := engine.Key("account-", env.Rand.IntN(env.Keys))
	if d := env.Directed(); strings.HasPrefix(d, "account-") {
		return d
	}
	return k
}
