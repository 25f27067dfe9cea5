package harness

import (
	"context"
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
// appended.
const (
	sqlAccountsTables = `CREATE TABLE accounts (
	id            text   PRIMARY KEY,
	last_seq      bigint NOT NULL DEFAULT 0,
	fencing_token bigint NOT NULL DEFAULT 0
);
CREATE TABLE account_events (
	account     text   NOT NULL,
	seq         bigint NOT NULL,
	appended_by text   NOT NULL
)`
	sqlAccountsSeed = `INSERT INTO accounts (id) SELECT 'account-' || i FROM generate_series(0, $1 - 1) AS i`
	sqlAccountsLog  = `SELECT account, seq, appended_by FROM account_events`
	// sqlAccountsRead is the plain read of an entity's last number.
	sqlAccountsRead = `SELECT last_seq FROM accounts WHERE id = $1`
)

// accounts is the scenario of entities whose event logs clients append the
// next sequence number to: the logs found after the run are held to
// Sequences — per entity no number twice, none missing, every number a
// client was told in the log.
type accounts struct{}

func init() { Register(accounts{}) }

func (accounts) Name() string { return "accounts" }
func (accounts) Order() int   { return 4 }
func (accounts) Description() string {
	return "clients append the next sequence number to an entity's event log; per entity, no gap, no duplicate, every acknowledged number in the log"
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
	return history.Sequences(ops, log)
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
