package engine

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// An operation whose charge committed and whose next step failed with an
// error that is by itself a certain failure — its context ended before the
// record was sent, a refusal, an error the server answered — took effect:
// Finish records it as unknown, never as a failure, else the check counts
// its charge as one made by a refused operation. Without Took the same
// errors are failures.
func TestFinishAfterTookIsNeverAFailure(t *testing.T) {
	ended := fmt.Errorf("store record: %w", history.NotSent(context.DeadlineExceeded))
	answered := &pgconn.PgError{Severity: "ERROR", Code: "57014", Message: "canceling statement due to user request"}
	for _, tc := range []struct {
		name string
		err  error
	}{{"context ended before send", ended}, {"refusal", fencedlock.ErrFenced}, {"server error", answered}} {
		for _, took := range []bool{false, true} {
			var buf bytes.Buffer
			env := &Env{Client: 1, rec: history.NewRecorder(&buf)}
			_, op, err := env.Invoke(context.Background(), "pay-1", "charge", nil)
			if err != nil {
				t.Fatal(err)
			}
			op.passed.Store(true)
			if took {
				op.Took()
			}
			if err := op.Finish(nil, tc.err, fencedlock.ErrFenced); err != nil {
				t.Fatal(err)
			}
			ops, err := history.Read(&buf)
			if err != nil || len(ops) != 1 {
				t.Fatalf("%s: read %d ops: %v", tc.name, len(ops), err)
			}
			want := history.Fail
			if took {
				want = history.Unknown
			}
			if got := ops[0].Outcome; got != want {
				t.Errorf("%s, took %v: recorded %v, want %v", tc.name, took, got, want)
			}
		}
	}
}
