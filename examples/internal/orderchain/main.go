package orderchain

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/examples/internal/backend"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/outbox"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// Config is what the example runs on.
type Config struct {
	DB     *pgxpool.Pool // required: the chain has no memory backend
	Kafka  []string      // required
	Mode   string        // "lock" (the code being replaced), "alternative" or "both"
	Faults bool          // inject the faults that Compare is given
}

// Main parses the example's flags, opens its database (backend.Open, in a
// fresh schema) and calls run; an error exits with status 1.
func Main(name string, run func(ctx context.Context, cfg Config, w io.Writer) error) {
	pg := flag.String("postgres", os.Getenv("DATABASE_URL"), "PostgreSQL URL; empty: a throwaway local PostgreSQL")
	brokers := flag.String("kafka", os.Getenv("KAFKA_BROKERS"), "Kafka brokers (comma-separated)")
	mode := flag.String("mode", "both", "lock, alternative or both")
	faults := flag.Bool("faults", true, "lose an answer on every hop, and stop a publisher after its commit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := Config{Mode: *mode, Faults: *faults}
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Kafka = append(cfg.Kafka, b)
		}
	}
	err := errors.New("the chain needs PostgreSQL: it has no memory backend")
	if *pg != backend.Memory {
		err = open(ctx, *pg, cfg, run)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		stop()
		os.Exit(1)
	}
}

func open(ctx context.Context, pg string, cfg Config, run func(ctx context.Context, cfg Config, w io.Writer) error) error {
	b, err := backend.Open(ctx, pg, os.Stdout)
	if err != nil {
		return err
	}
	defer b.Close()
	if cfg.DB = b.Pool; cfg.DB == nil {
		return errors.New("the chain needs PostgreSQL, and found no server and no binaries to start one")
	}
	return run(ctx, cfg, os.Stdout)
}

// Compare applies the migrations ms and schema, then runs the chains that cfg.Mode selects: lock
// (the code being replaced) and alt (the replacement), labelled "lock,
// write, publish" and "exactly once". With cfg.Faults it injects faults and
// says so on the first line.
func Compare(ctx context.Context, cfg Config, w io.Writer, ms [][]migrate.Migration, schema string, reqs []Request, faults Faults,
	lock, alt func(context.Context, *Env) (*Chain, error)) error {
	runLock, runAlt := cfg.Mode == "lock" || cfg.Mode == "both", cfg.Mode == "alternative" || cfg.Mode == "both"
	switch {
	case !runLock && !runAlt:
		return fmt.Errorf("unknown -mode %q (want lock, alternative or both)", cfg.Mode)
	case cfg.DB == nil || len(cfg.Kafka) == 0:
		return errors.New("the chain needs PostgreSQL and Kafka (-postgres, -kafka)")
	}
	if err := migrate.Up(ctx, cfg.DB, migrate.Names{}, ms...); err != nil {
		return err
	}
	if _, err := cfg.DB.Exec(ctx, schema); err != nil {
		return err
	}
	if !cfg.Faults {
		faults = Faults{}
	} else {
		fmt.Fprintf(w, "faults: the answer to %s is lost; so are the publish answer of %s and the consumer's COMMIT answer of %s; "+
			"the publisher of %s stops after its commit\n", faults.Answer, faults.Publish, faults.Commit, faults.Stop)
	}
	if runLock {
		if err := Run(ctx, w, "lock, write, publish", cfg.DB, cfg.Kafka, faults, reqs, lock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
	}
	if runAlt {
		if err := Run(ctx, w, "exactly once", cfg.DB, cfg.Kafka, faults, reqs, alt); err != nil {
			return fmt.Errorf("exactly once: %w", err)
		}
	}
	return nil
}

// Relayed returns the Chain.Settle of a chain whose relay a publishes
// through e.Kafka, started with e.Pause.Context: after each request it
// waits until the outbox is empty. After Faults.Stop's request, a has
// published the event and paused before its delete, heartbeats and all.
// Relayed then starts a second relay (newRelay), which takes the partitions
// over once a's lease has run out and publishes the event again; then it
// resumes a, and waits until a's delete was refused.
func (e *Env) Relayed(a *outbox.Relay, newRelay func(name string) (*outbox.Relay, error)) func(ctx context.Context, item string) error {
	return func(ctx context.Context, item string) error {
		stop := item != "" && item == e.Faults.Stop
		if stop {
			if err := e.Pause.Reached(ctx); err != nil {
				return err
			}
			b, err := newRelay("relay-b")
			if err != nil {
				return err
			}
			if err := b.Start(ctx); err != nil {
				return err
			}
			e.stops = append(e.stops, func() { _ = b.Stop(context.WithoutCancel(ctx)) })
		}
		if err := Until(ctx, "the outbox is empty", e.OutboxEmpty); err != nil {
			return err
		}
		if !stop {
			return nil
		}
		e.Pause.Resume()
		return Until(ctx, "relay a's delete is refused", func(context.Context) (bool, error) { return a.Stats().Fenced == 1, nil })
	}
}

// Inbox returns the Chain.Consumed of a kafkawriter.Consumer in group: the
// offset it stored in the inbox.
func (e *Env) Inbox(group string) func(ctx context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		inbox, err := kafkawriter.NewInbox(e.DB, nil)
		if err != nil {
			return 0, err
		}
		next, _, _, err := inbox.Offset(ctx, group, e.Topic, 0)
		return next, err
	}
}
