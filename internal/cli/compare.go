package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/lockfree-go/lockfree/internal/localpg"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/scenario"
	"github.com/lockfree-go/lockfree/internal/short"
)

// compareFlags are the parsed flags of `lockfree compare`.
type compareFlags struct {
	names            []string
	clients, keys    []int
	rounds           int
	duration         time.Duration
	faults           []scenario.Fault
	backend, pgURL   string
	restartCmd       string
	kafka            string
	asJSON           bool
	out, chart, html string
}

func parseCompare(args []string, stderr io.Writer) (compareFlags, error) {
	var f compareFlags
	fs := flag.NewFlagSet("lockfree compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sc := fs.String("scenario", "all", "scenario: "+strings.Join(scenario.Names(), "|")+"|all")
	clients := fs.String("clients", "16", "concurrent clients; a list (1,4,16,64) sweeps them")
	keys := fs.String("keys", "1", "distinct keys (entities) the clients work on; a list (1,100,10000) sweeps them")
	fs.IntVar(&f.rounds, "rounds", 1, "run the approaches interleaved this many rounds and report medians and the spread of the ratios")
	fs.DurationVar(&f.duration, "duration", 5*time.Second, "how long each approach runs (per point and round)")
	faults := fs.String("faults", "none", "none, or a comma-separated list of pause, partition, restart")
	fs.StringVar(&f.backend, "backend", "auto", "auto|postgres|memory")
	fs.StringVar(&f.pgURL, "postgres", "", "PostgreSQL connection string, URL or key/value (default $DATABASE_URL); printed as host:port/database only")
	fs.StringVar(&f.restartCmd, "restart-cmd", os.Getenv("LOCKFREE_POSTGRES_RESTART"), "shell command that restarts --postgres's server, for --faults restart")
	fs.StringVar(&f.kafka, "kafka", os.Getenv("KAFKA_BROKERS"), "Kafka brokers (comma-separated) for the events scenario")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object per scenario (and sweep point) instead of a table")
	fs.StringVar(&f.out, "out", "", "also write a Markdown report to this file")
	fs.StringVar(&f.chart, "chart", "", "also write an SVG bar chart (throughput and p99 per approach) to this file")
	fs.StringVar(&f.html, "html", "", "also write one self-contained HTML report (verdict, tables, charts, sweeps, timelines) to this file")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, usageError{fmt.Errorf("unexpected arguments %s", short.Quote(strings.Join(fs.Args(), " ")))}
	}
	var err error
	if f.faults, err = scenario.ParseFaults(*faults); err != nil {
		return f, usageError{err}
	}
	if f.clients, err = report.ParseInts(*clients, 1, 1024); err != nil {
		return f, usageError{fmt.Errorf("--clients: %w", err)}
	}
	if f.keys, err = report.ParseInts(*keys, 1, 10_000_000); err != nil {
		return f, usageError{fmt.Errorf("--keys: %w", err)}
	}
	if f.duration < 100*time.Millisecond || f.duration > time.Hour || f.rounds < 1 || f.rounds > 100 {
		return f, usageError{errors.New("want 100ms ≤ duration ≤ 1h and 1 ≤ rounds ≤ 100")}
	}
	if *sc == "all" {
		f.names = scenario.Names()
	} else if _, ok := scenario.Lookup(*sc); ok {
		f.names = []string{*sc}
	} else {
		return f, usageError{fmt.Errorf("unknown scenario %s (want %s or all)", short.Quote(*sc), strings.Join(scenario.Names(), ", "))}
	}
	return f, nil
}

// command is the run's command line as the HTML report shows it: the
// parsed settings, never the connection string.
func (f compareFlags) command() string {
	sc := "all"
	if len(f.names) == 1 {
		sc = f.names[0]
	}
	return fmt.Sprintf("lockfree compare --scenario %s --clients %s --keys %s --duration %s --faults %s --rounds %d",
		sc, joinInts(f.clients), joinInts(f.keys), f.duration, report.FaultList(f.faults), f.rounds)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func compare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseCompare(args, stderr)
	if err != nil {
		return err
	}
	infra, cleanup, err := resolveBackend(ctx, f.backend, f.pgURL, f.restartCmd, stderr)
	if err != nil {
		return err
	}
	defer cleanup()
	if f.kafka != "" {
		infra.Kafka = strings.Split(f.kafka, ",")
	}
	var reports []report.Report
	for _, n := range f.names {
		s, _ := scenario.Lookup(n)
		for _, c := range f.clients {
			for _, k := range f.keys {
				cfg := scenario.Config{Clients: c, Keys: k, Duration: f.duration, Faults: f.faults}
				rep, err := runPoint(ctx, s, cfg, infra, f.rounds, stderr)
				if err != nil {
					return err
				}
				reports = append(reports, rep)
				if f.asJSON {
					b, err := json.Marshal(rep)
					if err != nil {
						return err
					}
					fmt.Fprintln(stdout, string(b))
				} else {
					report.WriteTable(stdout, rep)
				}
			}
		}
	}
	if !f.asJSON {
		for _, s := range report.Sweeps(reports) {
			report.WriteSweep(stdout, s)
		}
		report.WriteVerdicts(stdout, reports, 100)
	}
	return writeFiles(f, reports)
}

// runPoint runs every approach of s at one size: once, or --rounds times
// interleaved (round 1: every approach, round 2: every approach, …) so that
// a drift of the machine's load hits every approach alike. Progress goes to
// stderr, closed before the caller prints on stdout.
func runPoint(ctx context.Context, s scenario.Scenario, cfg scenario.Config, infra scenario.Infra, rounds int, stderr io.Writer) (report.Report, error) {
	live := report.NewProgress(stderr)
	defer live.Close()
	cfg.Progress, cfg.Live = live, live
	if rounds == 1 {
		return scenario.Run(ctx, s, cfg, infra)
	}
	all := make([][]report.Report, rounds)
	for r := range all {
		for _, a := range s.Approaches {
			cfg.Approaches = []scenario.Approach{a}
			rep, err := scenario.Run(ctx, s, cfg, infra)
			if err != nil {
				return rep, fmt.Errorf("round %d: %w", r+1, err)
			}
			all[r] = append(all[r], rep)
		}
	}
	return report.MergeRounds(all), nil
}

// writeFiles writes the Markdown, SVG and HTML reports that were asked for.
func writeFiles(f compareFlags, reps []report.Report) error {
	if f.out != "" {
		if err := os.WriteFile(f.out, []byte(report.Markdown(reps)), 0o644); err != nil {
			return err
		}
	}
	if f.chart != "" {
		if err := os.WriteFile(f.chart, []byte(report.SVGChart(reps)), 0o644); err != nil {
			return err
		}
	}
	if f.html != "" {
		var b bytes.Buffer
		if err := report.WriteHTML(&b, reps, report.HTMLOptions{Generated: time.Now(), Command: f.command()}); err != nil {
			return err
		}
		if err := os.WriteFile(f.html, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// resolveBackend picks the database: --postgres or $DATABASE_URL, else (auto)
// a throwaway local server when the binaries exist, else memory.
func resolveBackend(ctx context.Context, backend, url, restartCmd string, stderr io.Writer) (scenario.Infra, func(), error) {
	nothing := func() {}
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	switch backend {
	case "memory":
		fmt.Fprintln(stderr, "lockfree: backend memory (in-process stores; partition and restart faults do not apply)")
		return scenario.Infra{}, nothing, nil
	case "auto", "postgres":
	default:
		return scenario.Infra{}, nothing, usageError{fmt.Errorf("unknown backend %q (want auto, postgres, memory)", backend)}
	}
	if url != "" {
		infra := scenario.Infra{URL: url}
		if restartCmd != "" {
			infra.Restart = func(ctx context.Context) error {
				out, err := exec.CommandContext(ctx, "bash", "-c", restartCmd).CombinedOutput()
				if err != nil {
					return fmt.Errorf("%s: %w\n%s", restartCmd, err, out)
				}
				return nil
			}
		}
		fmt.Fprintf(stderr, "lockfree: backend postgres at %s\n", pgaddr.Describe(url))
		return infra, nothing, nil
	}
	if !localpg.Available() {
		if backend == "postgres" {
			return scenario.Infra{}, nothing, errors.New("--backend postgres needs --postgres, DATABASE_URL, or PostgreSQL binaries for a throwaway server")
		}
		fmt.Fprintln(stderr, "lockfree: no database given and no PostgreSQL binaries found: backend memory")
		return scenario.Infra{}, nothing, nil
	}
	fmt.Fprintln(stderr, "lockfree: no database given: starting a throwaway local PostgreSQL (backend postgres)")
	srv, err := localpg.Start(ctx)
	if err != nil {
		return scenario.Infra{}, nothing, err
	}
	return scenario.Infra{URL: srv.URL, Restart: srv.Restart}, srv.Stop, nil
}
