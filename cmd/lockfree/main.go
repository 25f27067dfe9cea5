// Command lockfree compares lock-free mechanisms with fenced and naive locks
// under faults, and applies lockfree's database schema.
//
//	lockfree compare [flags]      run every approach side by side; see -h
//	lockfree migrate up|print     apply or print the PostgreSQL schema (--packages a,b; default all)
//	lockfree locks [flags]        list the locks held in a database, with their holders
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/cli"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	_ "github.com/lockfree-go/lockfree/cmd/lockfree/internal/scenario" // every scenario, registered
)

func main() {
	// `lockfree compare` re-executes this binary as its worker processes,
	// marked by the environment: a worker takes its orders on stdin and
	// must not parse the command line or catch the coordinator's signals.
	if engine.IsWorker() {
		os.Exit(engine.WorkerMain())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
