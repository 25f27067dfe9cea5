package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
)

// lockRow is one held lock as `lockfree locks --json` prints it; its times
// are the store's clock.
type lockRow struct {
	Name    string    `json:"name"`
	Holder  string    `json:"holder"`
	Token   int64     `json:"token"`
	Value   string    `json:"value"`
	Since   time.Time `json:"since"`
	Expires time.Time `json:"expires"`
}

// locksFlags are the flags of `lockfree locks`.
type locksFlags struct {
	db, schema, prefix, names string
	limit                     int
	json                      bool
}

func parseLocksFlags(args []string, stderr io.Writer) (locksFlags, error) {
	var f locksFlags
	fs := flag.NewFlagSet("lockfree locks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.db, "postgres", os.Getenv("DATABASE_URL"), "PostgreSQL connection string, URL or key/value (default $DATABASE_URL)")
	fs.StringVar(&f.schema, "schema", "", "schema of lockfree's tables (default: the connection's search_path)")
	fs.StringVar(&f.prefix, "prefix", migrate.DefaultPrefix, "prefix of lockfree's table names")
	fs.StringVar(&f.names, "names", "", "list only the locks whose name starts with this (leader/, partition/, …)")
	fs.IntVar(&f.limit, "limit", 1000, "list at most this many locks, in name order")
	fs.BoolVar(&f.json, "json", false, "print one JSON object per lock (times on the database's clock)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	switch {
	case fs.NArg() > 0:
		return f, usageError{fmt.Errorf("unexpected argument %s", short.Quote(fs.Arg(0)))}
	case f.limit < 1:
		return f, usageError{fmt.Errorf("--limit %d: want at least 1", f.limit)}
	case f.db == "":
		return f, usageError{fmt.Errorf("locks needs --postgres or DATABASE_URL")}
	}
	names := migrate.Names{Schema: f.schema, Prefix: f.prefix}
	if err := names.Validate(); err != nil {
		return f, usageError{err}
	}
	return f, nil
}

// locksCmd lists the locks held in a database's lock table, for
// operators: fencedlock's List, page by page.
func locksCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseLocksFlags(args, stderr)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, f.db)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := fencedlock.NewPostgres(pool, &fencedlock.PostgresConfig{Tables: migrate.Names{Schema: f.schema, Prefix: f.prefix}})
	if err != nil {
		return usageError{err}
	}
	rows, now, more, err := listLocks(ctx, store, f.names, f.limit)
	if err != nil {
		return err
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	return printLocks(stdout, rows, now, more)
}

// listLocks lists up to limit locks whose names start with prefix, and
// the store's clock at the last page; more says that some were left out.
func listLocks(ctx context.Context, store fencedlock.Lister, prefix string, limit int) (rows []lockRow, now time.Time, more bool, err error) {
	q := fencedlock.ListQuery{Prefix: prefix}
	for {
		q.Limit = min(fencedlock.MaxListLimit, limit-len(rows))
		page, err := store.List(ctx, q)
		if err != nil {
			return nil, time.Time{}, false, err
		}
		now = page.Now
		for _, h := range page.Locks {
			rows = append(rows, lockRow{Name: h.Name, Holder: h.Holder, Token: h.Token, Value: h.Value, Since: h.Since, Expires: h.Expires})
		}
		if page.Next == "" {
			return rows, now, false, nil
		}
		if len(rows) >= limit {
			return rows, now, true, nil
		}
		q.After = page.Next
	}
}

// printLocks prints rows as a table, their times as ages and what is left
// of their leases on the store's clock (now).
func printLocks(w io.Writer, rows []lockRow, now time.Time, more bool) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no lock held")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHOLDER\tTOKEN\tVALUE\tSINCE\tEXPIRES")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s ago\tin %s\n", short.Quote(r.Name), short.Quote(r.Holder), strconv.FormatInt(r.Token, 10),
			short.Quote(r.Value), age(now.Sub(r.Since)), age(r.Expires.Sub(now)))
	}
	if more {
		fmt.Fprintln(tw, "… more locks held: raise --limit, or narrow --names")
	}
	return tw.Flush()
}

// age rounds d for a person: to the millisecond below a second, to the
// tenth of a second above.
func age(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
