// Package cli implements the lockfree command.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/occ"
	"github.com/lockfree-go/lockfree/outbox"
	"github.com/lockfree-go/lockfree/partition"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

const usage = `lockfree: distributed locks, and what to use instead

usage:
  lockfree compare [flags]     run each approach side by side under faults (lockfree compare -h)
  lockfree migrate up [flags]     apply the PostgreSQL schema (--packages fencedlock,idempotency,…; default all)
  lockfree migrate print [flags]  print that schema as SQL (for goose, tern, golang-migrate)
  lockfree locks [flags]       list the locks held in a database: name, holder, token, value, since, expires
`

// Main runs the command with args (without the program name) and returns
// the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "compare":
		err = compare(ctx, args[1:], stdout, stderr)
	case "migrate":
		err = migrateCmd(ctx, args[1:], stdout, stderr)
	case "locks":
		err = locksCmd(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "lockfree: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "lockfree %s: %v\n", args[0], err)
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError struct{ error }

// packageMigrations is the schema of every package that has one, by name.
var packageMigrations = map[string]func() []migrate.Migration{
	"atomic":       atomic.Migrations,
	"fencedlock":   fencedlock.Migrations,
	"idempotency":  idempotency.Migrations,
	"occ":          occ.Migrations,
	"outbox":       outbox.Migrations,
	"partition":    partition.Migrations,
	"singlewriter": kafkawriter.Migrations, // the set kept its name when it moved to singlewriter/kafkawriter
}

// migrationSets returns the sets of the packages named in list (comma
// separated; empty or "all" means every package).
func migrationSets(list string) ([][]migrate.Migration, error) {
	names := slices.Sorted(maps.Keys(packageMigrations))
	if list != "" && list != "all" {
		names = nil
		for _, name := range strings.Split(list, ",") {
			name = strings.TrimSpace(name)
			if packageMigrations[name] == nil {
				return nil, usageError{fmt.Errorf("--packages: no package %s has migrations (want %s)",
					short.Quote(name), strings.Join(slices.Sorted(maps.Keys(packageMigrations)), ", "))}
			}
			names = append(names, name)
		}
	}
	sets := make([][]migrate.Migration, 0, len(names))
	for _, name := range names {
		sets = append(sets, packageMigrations[name]())
	}
	return sets, nil
}

func migrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "up" && args[0] != "print") {
		return usageError{fmt.Errorf("want `migrate up` or `migrate print`")}
	}
	fs := flag.NewFlagSet("lockfree migrate "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("postgres", os.Getenv("DATABASE_URL"), "PostgreSQL connection string, URL or key/value (default $DATABASE_URL)")
	schema := fs.String("schema", "", "schema for lockfree's tables (default: the connection's search_path)")
	prefix := fs.String("prefix", migrate.DefaultPrefix, "prefix of lockfree's table names")
	down := fs.Bool("down", false, "print: the down migrations, in reverse order")
	packages := fs.String("packages", "all", "comma-separated packages whose schema to apply or print (fencedlock,idempotency,partition,singlewriter)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	sets, err := migrationSets(*packages)
	if err != nil {
		return err
	}
	names := migrate.Names{Schema: *schema, Prefix: *prefix}
	if args[0] == "print" {
		return migrate.Print(stdout, names, *down, sets...)
	}
	if *dbURL == "" {
		return usageError{fmt.Errorf("migrate up needs --postgres or DATABASE_URL")}
	}
	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrate.Up(ctx, pool, names, sets...); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "lockfree: schema up to date (%s)\n", *packages)
	return nil
}
