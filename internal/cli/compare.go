package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lockfree-go/lockfree/internal/localpg"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/scenario"
)

func compare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lockfree compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sc := fs.String("scenario", "all", "scenario: "+strings.Join(scenario.Names(), "|")+"|all")
	clients := fs.Int("clients", 16, "concurrent clients")
	keys := fs.Int("keys", 1, "distinct keys (entities) the clients work on")
	duration := fs.Duration("duration", 5*time.Second, "how long each approach runs")
	faults := fs.String("faults", "none", "none, or a comma-separated list of pause, partition, restart")
	backend := fs.String("backend", "auto", "auto|postgres|memory")
	pgURL := fs.String("postgres", "", "PostgreSQL connection string, URL or key/value (default $DATABASE_URL); printed as host:port/database only")
	restartCmd := fs.String("restart-cmd", os.Getenv("LOCKFREE_POSTGRES_RESTART"), "shell command that restarts --postgres's server, for --faults restart")
	kafka := fs.String("kafka", os.Getenv("KAFKA_BROKERS"), "Kafka brokers (comma-separated) for the events scenario")
	asJSON := fs.Bool("json", false, "print one JSON object per scenario instead of a table")
	out := fs.String("out", "", "also write a Markdown report to this file")
	chart := fs.String("chart", "", "also write an SVG bar chart (throughput and p99 per approach) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	fl, err := scenario.ParseFaults(*faults)
	if err != nil {
		return usageError{err}
	}
	if *clients < 1 || *clients > 1024 || *keys < 1 || *keys > 10_000_000 || *duration < 100*time.Millisecond || *duration > time.Hour {
		return usageError{errors.New("want 1 ≤ clients ≤ 1024, 1 ≤ keys ≤ 10,000,000, 100ms ≤ duration ≤ 1h")}
	}
	var names []string
	if *sc == "all" {
		names = scenario.Names()
	} else if _, ok := scenario.Lookup(*sc); ok {
		names = []string{*sc}
	} else {
		return usageError{fmt.Errorf("unknown scenario %q (want %s or all)", *sc, strings.Join(scenario.Names(), ", "))}
	}

	infra, cleanup, err := resolveBackend(ctx, *backend, *pgURL, *restartCmd, stderr)
	if err != nil {
		return err
	}
	defer cleanup()
	if *kafka != "" {
		infra.Kafka = strings.Split(*kafka, ",")
	}

	cfg := scenario.Config{Clients: *clients, Keys: *keys, Duration: *duration, Faults: fl, Progress: stderr}
	var reports []scenario.Report
	for _, n := range names {
		s, _ := scenario.Lookup(n)
		rep, err := scenario.Run(ctx, s, cfg, infra)
		if err != nil {
			return err
		}
		reports = append(reports, rep)
		if *asJSON {
			b, _ := json.Marshal(rep)
			fmt.Fprintln(stdout, string(b))
		} else {
			printTable(stdout, rep)
		}
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(markdown(reports)), 0o644); err != nil {
			return err
		}
	}
	if *chart != "" {
		if err := os.WriteFile(*chart, []byte(svgChart(reports)), 0o644); err != nil {
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

func faultList(fs []scenario.Fault) string {
	if len(fs) == 0 {
		return "none"
	}
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ",")
}

func printTable(w io.Writer, rep scenario.Report) {
	fmt.Fprintf(w, "\n%s — backend %s, %d clients, %d keys, %.0fs per approach, faults %s\n",
		rep.Scenario, rep.Backend, rep.Clients, rep.Keys, rep.DurationS, faultList(rep.Faults))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "approach\tops/s\tp50 ms\tp99 ms\tops\tretries\trejected\terrors\tuncertain\tpauses\tviolations\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.2f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n",
			r.Approach, r.OpsPerSec, r.P50ms, r.P99ms, r.Ops, r.Retries, r.Rejected, r.Errors, r.Uncertain, r.Pauses, r.Violations)
	}
	tw.Flush()
	for _, r := range rep.Results {
		fmt.Fprintf(w, "  %-12s %s", r.Approach, r.Label)
		if r.Detail != "" {
			fmt.Fprintf(w, " — %s", r.Detail)
		}
		fmt.Fprintln(w)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

func markdown(reps []scenario.Report) string {
	var b strings.Builder
	for _, rep := range reps {
		fmt.Fprintf(&b, "### %s\n\nbackend %s, %d clients, %d keys, %.0fs per approach, faults %s\n\n",
			rep.Scenario, rep.Backend, rep.Clients, rep.Keys, rep.DurationS, faultList(rep.Faults))
		b.WriteString("| approach | ops/s | p50 ms | p99 ms | retries | rejected | errors | uncertain | pauses | violations |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rep.Results {
			fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.2f | %d | %d | %d | %d | %d | %d |\n",
				r.Approach, r.OpsPerSec, r.P50ms, r.P99ms, r.Retries, r.Rejected, r.Errors, r.Uncertain, r.Pauses, r.Violations)
		}
		b.WriteString("\n")
		for _, r := range rep.Results {
			fmt.Fprintf(&b, "- `%s`: %s", r.Approach, r.Label)
			if r.Detail != "" {
				fmt.Fprintf(&b, " — %s", r.Detail)
			}
			b.WriteString("\n")
		}
		for _, n := range rep.Notes {
			fmt.Fprintf(&b, "- note: %s\n", n)
		}
		b.WriteString("\n")
	}
	return b.String()
}
