// Package singleton is the lab's scenario of a job that one instance must
// run once per period: each job's closing of a period sums the period's
// ledger into one row. Its approaches elect a leader per job (a fenced
// leader, a naive one), take a lock per closing (fenced, naive in Redis), or
// need no leader (a conditional insert of the period's row); its check
// holds every job to one closing per period, none by a stale leader, none
// missing, each from the period's complete ledger.
package singleton

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/migrate"
)

// The singleton tables. closings has no unique constraint, so that a period
// closed twice reaches the check; term is the fencing token (a leader's
// term, a lock's token) its writer held, 0 for none; closed_by is the ID of
// the operation that closed it. singleton_fences is the fenced approaches'
// highest token per job, singleton_claims the raw approach's record of the
// periods it closed, singleton_start the first period of the run.
const (
	sqlSingletonTables = `CREATE TABLE ledger (
	job    text   NOT NULL,
	period bigint NOT NULL,
	amount bigint NOT NULL
);
CREATE INDEX ledger_job_period ON ledger (job, period);
CREATE TABLE closings (
	id        bigserial PRIMARY KEY,
	job       text   NOT NULL,
	period    bigint NOT NULL,
	total     bigint NOT NULL,
	entries   bigint NOT NULL,
	term      bigint NOT NULL,
	closed_by text   NOT NULL
);
CREATE INDEX closings_job_period ON closings (job, period);
CREATE TABLE singleton_fences (
	job           text   PRIMARY KEY,
	fencing_token bigint NOT NULL
);
CREATE TABLE singleton_claims (
	job    text   NOT NULL,
	period bigint NOT NULL,
	PRIMARY KEY (job, period)
);
CREATE TABLE singleton_start (period bigint NOT NULL)`
	sqlSingletonSetStart = `INSERT INTO singleton_start (period) VALUES ($1)`
	sqlSingletonStart    = `SELECT period FROM singleton_start`
	// sqlSingletonPost posts one entry to a job's ledger.
	sqlSingletonPost = `INSERT INTO ledger (job, period, amount) VALUES ($1, $2, $3)`
	// sqlSingletonNext reads the oldest period of a job not closed yet:
	// closings are made in period order, so it follows the last one.
	sqlSingletonNext = `SELECT coalesce(max(period) + 1, $2::bigint) FROM closings WHERE job = $1`
	// sqlSingletonSum is the closing's part that sums the period's ledger.
	sqlSingletonSum = `(SELECT coalesce(sum(amount), 0) AS total, count(*) AS entries FROM ledger WHERE job = $1 AND period = $2) s`
	// sqlSingletonClose closes a period: no condition.
	sqlSingletonClose = `INSERT INTO closings (job, period, total, entries, term, closed_by)
SELECT $1::text, $2::bigint, s.total, s.entries, $3::bigint, $4::text FROM ` + sqlSingletonSum
)

// KindClose is a job's run for its oldest period not closed yet. OK: the
// run closed it (CloseOutput.Closed), or found nothing to close.
const KindClose = "close"

// CloseOutput is the Output of a close.
type CloseOutput struct {
	// Period is the period the run worked on; 0 when none was due.
	Period int64 `json:"period,omitempty"`
	// Closed: this run wrote the period's closing.
	Closed bool `json:"closed,omitempty"`
}

// A period is periodLen of the history clock, one clock for the machine;
// it is due to be closed settle after it ended, once every entry posted to
// it has committed (a post is one statement sent as its period runs).
const (
	periodLen = 100 * time.Millisecond
	settle    = time.Second
)

// periodAt is the period of t.
func periodAt(t history.Time) int64 { return int64(t) / int64(periodLen) }

// lastDue is the last period due to be closed at t.
func lastDue(t history.Time) int64 { return periodAt(t-history.Time(settle)) - 1 }

// singleton is the scenario of one job per key, closed once per period.
type singleton struct{}

func init() { engine.Register(singleton{}) }

func (singleton) Name() string { return "singleton" }
func (singleton) Order() int   { return 6 }
func (singleton) Description() string {
	return "each key is a job whose every 100 ms period must be closed once, by one instance, with the sum of the period's ledger (every client posts to it); each period is closed exactly once, never by a stale leader, none is skipped, and each closing counts its whole ledger"
}

// Harm is what a violation of the scenario is, in its verdicts' words.
func (singleton) Harm() engine.Harm {
	return engine.Harm{One: "closing", Many: "closings", Bad: "got %s wrong (a period closed twice, by a stale leader, from an incomplete ledger, or skipped)", None: "got none wrong"}
}

// FailoverVictim: any job's leader or lock holder will do.
func (singleton) FailoverVictim() string { return "" }

func (singleton) Migrations() []migrate.Migration { return nil }

// Kind tells the runs that closed a period from those that found none due
// (or, raw, found it closed by another).
func (singleton) Kind(op *history.Op) string {
	var out CloseOutput
	if json.Unmarshal(op.Output, &out) != nil || !out.Closed {
		return ""
	}
	return "closings"
}

func (singleton) Setup(ctx context.Context, db *pgxpool.Pool, _ engine.Sizes) error {
	if _, err := db.Exec(ctx, sqlSingletonTables); err != nil {
		return err
	}
	_, err := db.Exec(ctx, sqlSingletonSetStart, periodAt(history.Now()))
	return err
}

func (singleton) Check(ctx context.Context, db *pgxpool.Pool, ops []history.Op, _ engine.Sizes) (*history.Findings, error) {
	var start int64
	if err := db.QueryRow(ctx, sqlSingletonStart).Scan(&start); err != nil {
		return nil, err
	}
	closings, err := readClosings(ctx, db)
	if err != nil {
		return nil, err
	}
	return Check(ops, closings, start)
}

// errNoStart is returned by a client whose run's schema has no first
// period.
var errNoStart = errors.New("harness: singleton: the run has no first period")

// runStart reads the run's first period.
func runStart(ctx context.Context, env *engine.Env) (int64, error) {
	var start int64
	err := env.DB.QueryRow(ctx, sqlSingletonStart).Scan(&start)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, errNoStart
	}
	return start, err
}
