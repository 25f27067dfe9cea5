package engine

import (
	"context"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PartitionKey is the key of a consumer's work on partition p (Env.Task):
// what a fault is injected into and another member takes over.
func PartitionKey(p int) string { return "partition-" + strconv.Itoa(p) }

// TaskDB is a worker's pool whose transactions tell the fault injector when
// they end: the background work a consumer's handler runs in one is a task
// (Env.Task), and the injector waits for a stopped task's transaction to
// commit or be refused before it lets the worker that took over go on.
type TaskDB struct{ *pgxpool.Pool }

func (d TaskDB) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &taskTx{Tx: tx}, nil
}

// taskTx is a transaction of TaskDB: the tasks of the handler that runs in
// it (OnTask) end once it has committed or rolled back.
type taskTx struct {
	pgx.Tx
	mu    sync.Mutex
	done  []func()
	tasks []context.Context // the tasks whose events it applies (OnTask)
}

// OnTask ties the task of tctx, whose end is done, to tx, a transaction of
// TaskDB (or one that wraps it, Unwrap): the task ends when tx commits or
// rolls back, and the event it marked applied (MarkApplied) is cleared if
// tx did not commit. It reports whether the task is tx's first, before
// which tx wrote nothing of the handler's; false when tx is no TaskDB's.
func OnTask(tx pgx.Tx, tctx context.Context, done func()) (first bool) {
	t, ok := taskTxOf(tx)
	if !ok {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	first = len(t.done) == 0
	t.done = append(t.done, done)
	t.tasks = append(t.tasks, tctx)
	return first
}

// taskTxOf returns the taskTx that tx is or wraps (kafkawriter's fenced
// twin hands its handler the transaction wrapped, so that the handler's
// batch carries the fenced write).
func taskTxOf(tx pgx.Tx) (*taskTx, bool) {
	for {
		if t, ok := tx.(*taskTx); ok {
			return t, true
		}
		w, ok := tx.(interface{ Unwrap() pgx.Tx })
		if !ok {
			return nil, false
		}
		tx = w.Unwrap()
	}
}

func (t *taskTx) end(committed bool) {
	t.mu.Lock()
	done, tasks := t.done, t.tasks
	t.done, t.tasks = nil, nil
	t.mu.Unlock()
	for _, ctx := range tasks {
		if !committed {
			MarkApplied(ctx, "")
		}
	}
	for _, d := range done {
		d()
	}
}

func (t *taskTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	t.end(err == nil)
	return err
}

func (t *taskTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.end(false)
	return err
}
