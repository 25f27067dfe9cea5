package harness

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/partition"
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

func init() { Register(accounts{}) }

func (accounts) Name() string { return "accounts" }
func (accounts) Order() int   { return 4 }
func (accounts) Description() string {
	return "clients append the next sequence number to an entity's event log; per entity, no gap, no duplicate, every acknowledged number in the log, no append by a stale owner"
}
func (accounts) Migrations() []migrate.Migration { return partition.Migrations() }

func (accounts) Setup(ctx context.Context, db *pgxpool.Pool, s Sizes) error {
	if _, err := db.Exec(ctx, sqlAccountsTables); err != nil {
		return err
	}
	_, err := db.Exec(ctx, sqlAccountsSeed, s.Keys)
	return err
}

func (accounts) Check(ctx context.Context, db *pgxpool.Pool, ops []history.Op, _ Sizes) (*history.Report, error) {
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
	rep, err := history.Sequences(ops, log)
	if err != nil {
		return nil, err
	}
	return rep, staleOwners(ctx, db, ops, rep)
}

// staleOwner is an append written by a partition's stale owner: under an
// epoch that was no longer the partition's. The sequence checks cannot see
// it when the write happened to follow the right number.
const staleOwner history.Anomaly = "stale owner"

// staleOwners adds to rep a violation for each append a stale owner wrote:
// the single writer's guarantee, checked directly, not only through its
// effect on the sequences.
func staleOwners(ctx context.Context, db *pgxpool.Pool, ops []history.Op, rep *history.Report) error {
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
		for i := range rep.Keys {
			if rep.Keys[i].Key == key {
				rep.Keys[i].Violations = append(rep.Keys[i].Violations, v)
				rep.Keys[i].Status = history.Violated
				return nil
			}
		}
		rep.Keys = append(rep.Keys, history.KeyReport{Key: key, Status: history.Violated, Violations: []history.Violation{v}})
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
func accountAppend(ctx context.Context, env *Env, key string) (context.Context, *Op, error) {
	return env.Invoke(ctx, key, history.KindAppend, nil)
}

// accountKey picks the entity of a client's next append.
func accountKey(env *Env) string { return Key("account-", env.Rand.IntN(env.Keys)) }

// writeTimeout bounds a write sent after a fault: it is sent whatever the
// operation's deadline, so that a stale write reaches the fence that must
// refuse it.
const writeTimeout = 5 * time.Second
