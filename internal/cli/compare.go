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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockfree-go/lockfree/internal/harness"
	"github.com/lockfree-go/lockfree/internal/localpg"
	"github.com/lockfree-go/lockfree/internal/localredis"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/replpair"
	"github.com/lockfree-go/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/short"

	"golang.org/x/term"
)

// The defaults of `lockfree compare`: a run that shows, in about a minute on
// a two-core machine with the embedded server, each approach under real
// pauses past its lease — enough workers that another takes over while one
// is stopped, long enough for several pauses per approach. The events
// scenario is left out: its consumers drain the backlog the producers left
// after the measured part, which takes its lock-based approaches tens of
// seconds on a loaded machine (`--scenario all` runs it).
const (
	defaultScenarios = "inventory,documents,payments,accounts"
	defaultClients   = "6"
	defaultDuration  = 2 * time.Second
	defaultFaults    = "pause"
	// The default run shows the Redis lock most teams run today beside ours;
	// redsync-lock, its variant, runs on request (the default stays near a
	// minute).
	defaultApproaches = "alternative,fenced-lock,naive-lock,redis-lock,raw"
)

// compareFlags are the parsed flags of `lockfree compare`.
type compareFlags struct {
	names             []string
	approaches        []harness.Approach
	clients, keys     []int
	rounds            int
	duration          time.Duration
	faults            []harness.Fault
	pgURL, restartCmd string
	kafka             string
	redis             string
	asJSON, list      bool
	metrics           bool
	markdown, chart   string
	html              string
}

func parseCompare(args []string, stderr io.Writer) (compareFlags, error) {
	var f compareFlags
	fs := flag.NewFlagSet("lockfree compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sc := fs.String("scenario", defaultScenarios, "scenarios, comma-separated ("+strings.Join(harness.Names(), ",")+"), or all")
	approaches := fs.String("approaches", defaultApproaches, "approaches, comma-separated: alternative,verified-alternative and verified-lock (accounts only),fenced-lock,naive-lock,redis-lock,redsync-lock,raw,plain-token-lock (under --faults failover only; added to the default list there), or all")
	clients := fs.String("clients", defaultClients, "worker processes per approach, one client each; a list (2,8,32) sweeps them")
	keys := fs.String("keys", "1", "distinct keys (entities) the clients work on; a list (1,100,10000) sweeps them")
	fs.IntVar(&f.rounds, "rounds", 1, "run the approaches interleaved this many rounds and report medians and the spread of the ratios")
	fs.DurationVar(&f.duration, "duration", defaultDuration, "how long each approach is measured (per point and round), after a warm-up")
	faults := fs.String("faults", defaultFaults, "none, or a comma-separated list of "+faultList())
	backend := fs.String("backend", "auto", "auto|postgres: the harness always runs on PostgreSQL (--postgres, $DATABASE_URL, or an embedded server)")
	fs.StringVar(&f.pgURL, "postgres", "", "PostgreSQL connection string, URL or key/value (default $DATABASE_URL, else an embedded server); printed as host:port/database only")
	fs.StringVar(&f.restartCmd, "restart-cmd", os.Getenv("LOCKFREE_POSTGRES_RESTART"), "shell command that restarts --postgres's server, for --faults restart")
	fs.StringVar(&f.redis, "redis", os.Getenv("REDIS_ADDR"), "Redis address (host:port, or redis://:password@host:port) for redis-lock and redsync-lock; empty: a throwaway redis-server when one is installed, else those approaches are reported as skipped")
	fs.StringVar(&f.kafka, "kafka", os.Getenv("KAFKA_BROKERS"), "Kafka brokers (comma-separated) for the events scenario's approaches but raw, which consume from a topic; without brokers that answer, those are reported as skipped")
	fs.BoolVar(&f.list, "list", false, "list the registered scenarios, their approaches and the faults, one line each, and exit")
	fs.BoolVar(&f.metrics, "metrics", false, "also report the metrics each approach's lockfree components recorded (OpenTelemetry, as a MeterProvider would receive them in production), summed over its workers")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object per scenario (and sweep point) instead of tables")
	fs.StringVar(&f.markdown, "markdown", "", "also write a Markdown report to this file")
	fs.StringVar(&f.markdown, "out", "", "same as --markdown")
	fs.StringVar(&f.chart, "chart", "", "also write an SVG bar chart (throughput and p99 per approach) to this file")
	fs.StringVar(&f.html, "html", "", "also write one self-contained HTML report (verdict, tables, charts, sweeps, timelines) to this file")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, usageError{fmt.Errorf("unexpected arguments %s", short.Quote(strings.Join(fs.Args(), " ")))}
	}
	if *backend != "auto" && *backend != "postgres" {
		return f, usageError{fmt.Errorf("unknown backend %s (want auto or postgres: the harness's workers are processes that share PostgreSQL)", short.Quote(*backend))}
	}
	var err error
	if f.faults, err = harness.ParseFaults(*faults); err != nil {
		return f, usageError{err}
	}
	if f.clients, err = report.ParseInts(*clients, 1, 256); err != nil {
		return f, usageError{fmt.Errorf("--clients: %w", err)}
	}
	if f.keys, err = report.ParseInts(*keys, 1, 10_000_000); err != nil {
		return f, usageError{fmt.Errorf("--keys: %w", err)}
	}
	if f.duration < 100*time.Millisecond || f.duration > time.Hour || f.rounds < 1 || f.rounds > 100 {
		return f, usageError{errors.New("want 100ms ≤ duration ≤ 1h and 1 ≤ rounds ≤ 100")}
	}
	if f.names, err = parseScenarios(*sc); err != nil {
		return f, err
	}
	if f.approaches, err = parseApproaches(*approaches); err != nil {
		return f, err
	}
	// The failover fault's foil runs beside the default approaches: it is
	// what shows the fault bit.
	if slices.Contains(f.faults, harness.Failover) && *approaches == defaultApproaches {
		f.approaches = append(f.approaches, harness.PlainTokenLock)
	}
	return f, nil
}

func faultList() string {
	var s []string
	for _, f := range harness.FaultNames() {
		s = append(s, string(f))
	}
	return strings.Join(s, ", ")
}

// parseScenarios parses "all" or a comma-separated list of scenarios.
func parseScenarios(list string) ([]string, error) {
	if list == "all" || list == "" {
		return harness.Names(), nil
	}
	var names []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if _, ok := harness.Lookup(n); !ok {
			return nil, usageError{fmt.Errorf("unknown scenario %s (want %s, or all)", short.Quote(n), strings.Join(harness.Names(), ", "))}
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names, nil
}

// wantsRedis reports whether the chosen approaches (nil: all) include a
// lock held in Redis.
func wantsRedis(as []harness.Approach) bool {
	return as == nil || slices.Contains(as, harness.RedisLock) || slices.Contains(as, harness.RedsyncLock)
}

// parseApproaches parses "all" (nil: every approach of each scenario) or a
// comma-separated list of approaches.
func parseApproaches(list string) ([]harness.Approach, error) {
	if list == "all" || list == "" {
		return nil, nil
	}
	known := []harness.Approach{harness.Alternative, harness.VerifiedAlternative, harness.FencedLock, harness.VerifiedLock, harness.NaiveLock, harness.RedisLock, harness.RedsyncLock, harness.Raw, harness.PlainTokenLock}
	var out []harness.Approach
	for _, n := range strings.Split(list, ",") {
		a := harness.Approach(strings.TrimSpace(n))
		if !slices.Contains(known, a) {
			return nil, usageError{fmt.Errorf("unknown approach %s (want alternative, verified-alternative, fenced-lock, verified-lock, naive-lock, redis-lock, redsync-lock, raw, plain-token-lock, or all)", short.Quote(string(a)))}
		}
		out = append(out, a)
	}
	return out, nil
}

// command is the run's command line as the HTML report shows it: the
// parsed settings, never the connection string.
func (f compareFlags) command() string {
	approaches := "all"
	if f.approaches != nil {
		s := make([]string, len(f.approaches))
		for i, a := range f.approaches {
			s[i] = string(a)
		}
		approaches = strings.Join(s, ",")
	}
	s := fmt.Sprintf("lockfree compare --scenario %s --approaches %s --clients %s --keys %s --duration %s --faults %s --rounds %d",
		strings.Join(f.names, ","), approaches, joinInts(f.clients), joinInts(f.keys), f.duration, report.FaultList(f.faults), f.rounds)
	if f.metrics {
		s += " --metrics"
	}
	return s
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
	if f.list {
		writeList(stdout)
		return nil
	}
	infra, cleanup, err := resolveBackend(ctx, f.pgURL, f.restartCmd, stderr)
	if err != nil {
		return err
	}
	defer cleanup()
	if slices.Contains(f.faults, harness.Failover) {
		pair, stop, err := startPair(ctx, stderr)
		if err != nil {
			return err
		}
		defer stop()
		infra.Failover = pair
	}
	if f.kafka != "" {
		infra.Kafka = strings.Split(f.kafka, ",")
	}
	if wantsRedis(f.approaches) {
		addr, stop := localredis.Resolve(ctx, f.redis, stderr)
		defer stop()
		infra.Redis = addr
	}
	var reports []report.Report
	var missed []error
	for _, n := range f.names {
		s, _ := harness.Lookup(n)
		for _, c := range f.clients {
			for _, k := range f.keys {
				cfg := harness.Config{Clients: c, Keys: k, Duration: f.duration, Faults: f.faults, Approaches: f.approaches,
					Metrics: f.metrics}
				rep, err := runPoint(ctx, s, cfg, infra, f.rounds, stderr)
				if err != nil && !partial(err) {
					return err
				}
				missed = append(missed, err)
				reports = append(reports, rep)
				if err := printReport(stdout, rep, f.asJSON); err != nil {
					return err
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
	if err := writeFiles(f, reports); err != nil {
		return err
	}
	return errors.Join(missed...)
}

// writeList prints the registry, for scripts: "scenario NAME APPROACH…" per
// scenario in report order, then "faults FAULT…".
func writeList(w io.Writer) {
	for _, sc := range harness.Scenarios() {
		fmt.Fprintf(w, "scenario %s", sc.Name())
		for _, d := range harness.Approaches(sc.Name()) {
			fmt.Fprintf(w, " %s", d.Approach())
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "faults %s\n", strings.ReplaceAll(faultList(), ",", ""))
}

func printReport(w io.Writer, rep report.Report, asJSON bool) error {
	if !asJSON {
		report.WriteTable(w, rep)
		report.WriteMetrics(w, rep)
		return nil
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// partial reports whether err, from a run that returned its report, leaves
// that report worth printing and the sweep worth going on: a fault that did
// not take effect somewhere, or an approach that failed (the report says
// which and why). The command still exits non-zero.
func partial(err error) bool {
	return errors.Is(err, harness.ErrNotInjected) || errors.Is(err, harness.ErrApproachFailed)
}

// runPoint runs every approach of s at one size: once, or --rounds times
// interleaved (round 1: every approach, round 2: every approach, …) so that
// a drift of the machine's load hits every approach alike. It returns the
// report with an error that partial accepts when a requested fault did not
// take effect somewhere or an approach failed. Live progress goes to stderr
// only when it is a terminal, closed before the caller prints on stdout.
func runPoint(ctx context.Context, s harness.Scenario, cfg harness.Config, infra harness.Infra, rounds int, stderr io.Writer) (report.Report, error) {
	if f, ok := stderr.(*os.File); ok && isTerminal(f) {
		live := report.NewTerminalProgress(stderr)
		defer live.Close()
		cfg.Live = live
	}
	if rounds == 1 {
		return harness.Run(ctx, s, cfg, infra)
	}
	var order []harness.Approach
	for _, d := range harness.Approaches(s.Name()) {
		if cfg.Approaches == nil || slices.Contains(cfg.Approaches, d.Approach()) {
			order = append(order, d.Approach())
		}
	}
	all := make([][]report.Report, rounds)
	var missed []error
	for r := range all {
		for _, a := range order {
			cfg.Approaches = []harness.Approach{a}
			rep, err := harness.Run(ctx, s, cfg, infra)
			if err != nil && !partial(err) {
				return rep, fmt.Errorf("round %d: %w", r+1, err)
			}
			missed = append(missed, err)
			all[r] = append(all[r], rep)
		}
	}
	return report.MergeRounds(all), errors.Join(missed...)
}

// writeFiles writes the Markdown, SVG and HTML reports that were asked for.
func writeFiles(f compareFlags, reps []report.Report) error {
	if f.markdown != "" {
		if err := os.WriteFile(f.markdown, []byte(report.Markdown(reps)), 0o644); err != nil {
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

// resolveBackend picks the database: --postgres or $DATABASE_URL, else a
// throwaway local server.
func resolveBackend(ctx context.Context, url, restartCmd string, stderr io.Writer) (harness.Infra, func(), error) {
	nothing := func() {}
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	if url != "" {
		infra := harness.Infra{URL: url}
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
		return harness.Infra{}, nothing, errors.New("no database: give --postgres or DATABASE_URL, or install PostgreSQL's server binaries (initdb, pg_ctl) for an embedded throwaway server")
	}
	fmt.Fprintln(stderr, "lockfree: no database given: starting a throwaway local PostgreSQL")
	srv, err := localpg.Start(ctx)
	if err != nil {
		return harness.Infra{}, nothing, err
	}
	return harness.Infra{URL: srv.URL, Restart: srv.Restart}, srv.Stop, nil
}

// startPair starts the primary and standby that --faults failover fails
// over: the lock service's database, beside the one the rows live in.
func startPair(ctx context.Context, stderr io.Writer) (*replpair.Pair, func(), error) {
	fmt.Fprintln(stderr, "lockfree: --faults failover: starting a PostgreSQL primary with a streaming standby for the lock service (scripts/pg-replication.sh)")
	pair, err := replpair.Start(ctx)
	if err != nil {
		if pair != nil {
			pair.Remove(context.WithoutCancel(ctx))
		}
		return nil, nil, fmt.Errorf("--faults failover: %w", err)
	}
	return pair, func() {
		if err := pair.Remove(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintf(stderr, "lockfree: removing the replication pair: %v\n", err)
		}
	}, nil
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
