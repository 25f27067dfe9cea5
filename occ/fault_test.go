package occ_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/internal/testproc"
	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/occ/occtest"
)

// pausedTwin is the child process of TestPausedProcessIsFenced: it
// increments the row with a Fenced twin in its default configuration (but
// for a short lease), says so at the inject point between its fenced read
// and its write, and goes on when told to — after its parent has stopped it
// past its lease and resumed it.
func pausedTwin(in *bufio.Scanner, out io.Writer) error {
	pool, err := pgxpool.New(ctx, os.Getenv("CHILD_DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := occ.NewPostgres[string, occtest.Doc](pool, occtest.TableName, &occtest.Config)
	if err != nil {
		return err
	}
	locks, err := fencedlock.NewPostgres(pool, nil)
	if err != nil {
		return err
	}
	tel := telemetrytest.Start()
	twin, err := occ.NewFenced(locks, store, &occ.FencedConfig{LockerConfig: fencedlock.LockerConfig{Holder: "child", TTL: time.Second,
		MeterProvider: tel.Meters}})
	if err != nil {
		return err
	}
	told := true
	defer failpoint.Handle(failpoint.At("occ.fenced.before-write", failpoint.Call(func(context.Context) {
		fmt.Fprintln(out, "read")
		told = in.Scan() && in.Text() == "write"
	})))()
	_, err = twin.Update(ctx, "row", increment)
	var fenced *fencedlock.FencedError
	switch {
	case !told:
		return errors.New("expected a write command")
	case errors.As(err, &fenced):
		n, err := tel.Total("lockfree.fencedlock.fenced.rejections")
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "result fenced %d > %d, %d counted\n", fenced.Required, fenced.Presented, n)
	case err != nil:
		return err
	default:
		fmt.Fprintln(out, "result written")
	}
	return nil
}

// A process stopped with SIGSTOP between the twin's fenced read and its
// write — keepalive and all — loses its lease; another holder reads and
// writes; the stopped process is resumed and writes: the fence rejects it,
// and the other holder's increment stays. The child's metrics count the
// rejection (lockfree.fencedlock.fenced.rejections).
func TestPausedProcessIsFenced(t *testing.T) {
	t.Parallel()
	db := newDocs(t)
	store := newDocStore(t, db)
	insertDoc(t, store, occtest.Doc{ID: "row"})
	locks, err := fencedlock.NewPostgres(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	child := testproc.Start(t, "paused-twin", "CHILD_DATABASE_URL="+db.URL)
	child.Expect("read", 60*time.Second)
	child.Stop()
	waitExpired(t, locks, "occ/docs/row") // on the database's clock
	twin, err := occ.NewFenced(locks, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := twin.Update(ctx, "row", increment); err != nil {
		t.Fatal(err)
	}
	child.Send("write")
	child.Continue()
	result := child.Expect("result", 60*time.Second)
	if d, v := loadDoc(t, store, "row"); !strings.HasPrefix(result, "fenced") || !strings.HasSuffix(result, ", 1 counted") || d.Counter != 1 || v != 2 {
		t.Fatalf("the resumed process's write: %q; counter %d at version %d, want fenced and 1 at 2", result, d.Counter, v)
	}
	if err := child.Wait(60 * time.Second); err != nil {
		t.Fatal(err)
	}
}
