package singleton

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/fencedlock"
)

// The fenced approaches' statements. The fenced read raises the job's
// token to the writer's, unless it has seen a higher one (then no row comes
// back); the oldest period not closed is read after it, in a statement of
// its own, so that it sees every closing a lower token committed. The
// fenced close inserts the closing only when the job's token is still not
// above the writer's.
const (
	sqlSingletonStamp = `INSERT INTO singleton_fences AS f (job, fencing_token) VALUES ($1, $2)
ON CONFLICT (job) DO UPDATE SET fencing_token = $2 WHERE f.fencing_token <= $2
RETURNING 1`
	sqlSingletonFencedClose = `WITH f AS (
	UPDATE singleton_fences SET fencing_token = $3 WHERE job = $1 AND fencing_token <= $3 RETURNING 1)
INSERT INTO closings (job, period, total, entries, term, closed_by)
SELECT $1::text, $2::bigint, s.total, s.entries, $3::bigint, $4::text FROM f, ` + sqlSingletonSum
)

// jobs is what the clients of every approach share: the run's first
// period, the choice of a job, and the steps of a job's run.
type jobs struct {
	env   *engine.Env
	start int64
}

func newJobs(ctx context.Context, env *engine.Env) (jobs, error) {
	start, err := runStart(ctx, env)
	return jobs{env: env, start: start}, err
}

// pick returns the job a taker was sent to, or one at random.
func (j *jobs) pick() string {
	if d := j.env.Directed(); d != "" {
		return d
	}
	return jobKey(j.env.Rand.IntN(j.env.Keys))
}

// jobKey is the key of job i.
func jobKey(i int) string { return engine.Key("job-", i) }

// invoke starts a run of key's job.
func (j *jobs) invoke(ctx context.Context, key string) (context.Context, *engine.Invocation, error) {
	return j.env.Invoke(ctx, key, KindClose, nil)
}

// post posts one entry to the ledger of op's job, in the current period:
// every instance has activity to record, the leader or not.
func (j *jobs) post(ctx context.Context, op *engine.Invocation) error {
	amount := 1 + j.env.Rand.Int64N(100)
	_, err := j.env.DB.Exec(ctx, sqlSingletonPost, op.Key(), periodAt(history.Now()), amount)
	return err
}

// next reads the oldest period of op's job not closed yet.
func (j *jobs) next(ctx context.Context, op *engine.Invocation) (int64, error) {
	var p int64
	err := j.env.DB.QueryRow(ctx, sqlSingletonNext, op.Key(), j.start).Scan(&p)
	return p, err
}

// fencedNext is next after the fenced read with token: ErrFenced when the
// job has seen a higher token.
func (j *jobs) fencedNext(ctx context.Context, op *engine.Invocation, token int64) (int64, error) {
	var one int
	err := j.env.DB.QueryRow(ctx, sqlSingletonStamp, op.Key(), token).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("harness: singleton: fenced read of %s with token %d: %w", op.Key(), token, fencedlock.ErrFenced)
	}
	if err != nil {
		return 0, err
	}
	return j.next(ctx, op)
}

// fencedClose closes period p of op's job with token, unless the job has
// seen a higher one (ErrFenced).
func (j *jobs) fencedClose(ctx context.Context, op *engine.Invocation, p, token int64) error {
	tag, err := j.env.DB.Exec(ctx, sqlSingletonFencedClose, op.Key(), p, token, op.ID())
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("harness: singleton: closing of %s period %d with token %d: %w", op.Key(), p, token, fencedlock.ErrFenced)
	}
	return nil
}

// plainClose closes period p of op's job, with term (0 for none) noted.
func (j *jobs) plainClose(ctx context.Context, op *engine.Invocation, p, term int64) error {
	_, err := j.env.DB.Exec(ctx, sqlSingletonClose, op.Key(), p, term, op.ID())
	return err
}

// steps are one approach's way through a job's run: read the oldest period
// not closed, then, past the before-write point, write its closing — closed
// reports whether it did.
type steps struct {
	point string
	read  func(ctx context.Context) (int64, error)
	write func(ctx context.Context, p int64) (closed bool, err error)
}

// run posts to op's job's ledger, runs the job with s, and completes op: a
// period not due yet is nothing to do.
func (j *jobs) run(ctx context.Context, op *engine.Invocation, s steps) error {
	if err := j.post(ctx, op); err != nil {
		return op.Finish(nil, err)
	}
	p, err := s.read(ctx)
	if err != nil {
		return op.Finish(nil, err, fencedlock.ErrFenced)
	}
	if p > lastDue(history.Now()) {
		return op.Ok(CloseOutput{})
	}
	j.env.BeforeWrite(ctx, s.point)
	closed, err := s.write(ctx, p)
	return op.Finish(CloseOutput{Period: p, Closed: closed}, err, fencedlock.ErrFenced)
}
