package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/localetcd"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/localpg"
	"github.com/lockfree-go/lockfree/internal/localredis"
	"github.com/lockfree-go/lockfree/internal/pgaddr"
	"github.com/lockfree-go/lockfree/internal/replpair"
	"github.com/lockfree-go/lockfree/internal/short"

	"golang.org/x/term"
)

// The defaults of `lockfree compare`: a run that shows, in about a minute on
// a two-core machine with the embedded server, each approach under real
// pauses past its lease — enough workers that another takes over while one
// is stopped, long enough for several pauses per approach. The scenarios
// are every registered one but those run on request only
// (engine.OnRequest).
const (
	defaultClients  = "6"
	defaultDuration = 2 * time.Second
	defaultFaults   = "pause"
)

// defaultApproaches: the default run shows the Redis lock most teams run
// today beside ours; redsync-lock, its variant, runs on request (the
// default stays near a minute).
var defaultApproaches = []engine.Approach{engine.Alternative, engine.FencedLock, engine.NaiveLock, engine.RedisLock, engine.Raw}

// compareFlags are the parsed flags of `lockfree compare`.
type compareFlags struct {
	names         []string
	approaches    []engine.Approach
	clients, keys []int
	// procs is how many worker processes run each approach's clients
	// (engine.Config.Procs); 0: one per client.
	procs             int
	rounds            int
	duration          time.Duration
	faults            []engine.Fault
	pgURL, restartCmd string
	kafka, kafkaCtl   string
	redis, etcd       string
	asJSON, list      bool
	metrics           bool
	markdown, chart   string
	html              string
	// seed draws the random schedules (--faults random) and seeds the
	// workers; 0 until compare draws one.
	seed uint64
	// soak, when set, runs the scenarios in passes until it has passed,
	// each pass with the next seed (soak.go).
	soak time.Duration
	// keep plays only these injections of the drawn schedule (--keep).
	keep []int
	// at is where the faults that stop a worker at a point stop it
	// (--at, engine.Config.At).
	at string
	// shrink lists the approaches whose violations under a random schedule
	// are shrunk (shrink.go); shrinkAll shrinks every approach's.
	shrink    []engine.Approach
	shrinkAll bool
}

func parseCompare(args []string, stderr io.Writer) (compareFlags, error) {
	var f compareFlags
	fs := flag.NewFlagSet("lockfree compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sc := fs.String("scenario", strings.Join(defaultScenarios(), ","), "scenarios, comma-separated ("+strings.Join(engine.Names(), ", ")+"), or all")
	approaches := fs.String("approaches", approachList(defaultApproaches), "approaches, comma-separated: "+approachHelp()+"; or all")
	clients := fs.String("clients", defaultClients, "clients per approach, each in a worker process of its own unless --procs says otherwise; a list (2,8,32) sweeps them")
	fs.IntVar(&f.procs, "procs", 0, "worker processes per approach, each running clients/procs clients, as a server runs many request handlers (0: one per client); must divide every --clients; for scenarios whose clients may share a process, under "+report.FaultList(engine.ProcFaults())+" or none")
	keys := fs.String("keys", "1", "distinct keys (entities) the clients work on; a list (1,100,10000) sweeps them")
	fs.IntVar(&f.rounds, "rounds", 1, "run the approaches interleaved this many rounds and report medians and the spread of the ratios")
	fs.DurationVar(&f.duration, "duration", defaultDuration, "how long each approach is measured (per point and round), after a warm-up")
	faults := fs.String("faults", defaultFaults, "none, or a comma-separated list of "+faultList())
	fs.Uint64Var(&f.seed, "seed", 0, "seed of --faults random's schedules (and of the workers' random choices); the same seed and options replay the same schedules; 0 draws one, printed")
	fs.DurationVar(&f.soak, "soak", 0, "run the scenarios again and again, each pass with the next seed, until this much time has passed (at most 24h); then print the violations by scenario and approach, with the seeds that showed them")
	fs.StringVar(&f.at, "at", engine.AtBeforeWrite, "where pause, stall, isolate, delay and crash stop a worker: "+engine.AtBeforeWrite+", or "+engine.AtInTx+" (inside a transaction of the approach's own; approaches without one are skipped); --faults random draws it")
	keep := fs.String("keep", "", "with --faults random, one scenario and one approach: play only these injections of the drawn schedule, by number (0,3,5), as --shrink prints them")
	shrink := fs.String("shrink", "", "approaches (comma-separated, or all) whose violations under --faults random are shrunk: their run again, dropping one injection at a time while violations stay, then the shortest schedule that still shows them")
	fs.StringVar(&f.pgURL, "postgres", "", "PostgreSQL connection string, URL or key/value (default $DATABASE_URL, else an embedded server); printed as host:port/database only")
	fs.StringVar(&f.restartCmd, "restart-cmd", os.Getenv("LOCKFREE_POSTGRES_RESTART"), "shell command that restarts --postgres's server, for --faults restart")
	fs.StringVar(&f.etcd, "etcd", os.Getenv("ETCD_ENDPOINTS"), "etcd endpoints (comma-separated URLs) for "+strings.ReplaceAll(approachList(engine.ApproachesNeeding("etcd")), ",", " and ")+"; empty: a throwaway etcd server inside this process")
	fs.StringVar(&f.redis, "redis", os.Getenv("REDIS_ADDR"), "Redis address (host:port, or redis://:password@host:port) for "+strings.ReplaceAll(approachList(engine.ApproachesNeeding("redis")), ",", " and ")+"; empty: a throwaway redis-server when one is installed, else those approaches are reported as skipped")
	fs.StringVar(&f.kafka, "kafka", os.Getenv("KAFKA_BROKERS"), "Kafka brokers (comma-separated) for the approaches that consume from a topic ("+kafkaHelp()+"); without brokers that answer, those are reported as skipped")
	fs.StringVar(&f.kafkaCtl, "kafka-ctl", os.Getenv("LOCKFREE_KAFKA_CTL"), "shell command that kills and starts --kafka's nodes when given \"kill ID\" or \"start ID\" (e.g. KAFKA_BROKERS=3 scripts/kafka.sh), for --faults broker-kill; with it, --faults random draws a broker kill into the schedule of each approach that uses Kafka")
	fs.BoolVar(&f.list, "list", false, "list the registered scenarios, their approaches, the faults and where each applies, one line each, and exit")
	fs.BoolVar(&f.metrics, "metrics", false, "also report the metrics each approach's lockfree components recorded (OpenTelemetry, as a MeterProvider would receive them in production), summed over its workers")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object per scenario (and sweep point) instead of tables")
	fs.StringVar(&f.markdown, "markdown", "", "also write a Markdown report to this file")
	fs.StringVar(&f.chart, "chart", "", "also write an SVG bar chart (throughput and p99 per approach) to this file")
	fs.StringVar(&f.html, "html", "", "also write one self-contained HTML report (verdict, tables, charts, sweeps, timelines) to this file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return f, err
		}
		return f, usageError{err}
	}
	if fs.NArg() > 0 {
		return f, usageError{fmt.Errorf("unexpected arguments %s", short.Quote(strings.Join(fs.Args(), " ")))}
	}
	var err error
	if f.faults, err = engine.ParseFaults(*faults); err != nil {
		return f, usageError{err}
	}
	if slices.Contains(f.faults, engine.Random) && len(f.faults) > 1 {
		return f, usageError{errors.New("--faults random draws its faults: give it alone")}
	}
	if f.at != engine.AtBeforeWrite && (f.at != engine.AtInTx || slices.Contains(f.faults, engine.Random)) {
		return f, usageError{fmt.Errorf("--at %s: want %s or %s, and not with --faults random, which draws it", short.Quote(f.at), engine.AtBeforeWrite, engine.AtInTx)}
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
	if f.soak < 0 || f.soak > 24*time.Hour {
		return f, usageError{errors.New("want 0 ≤ --soak ≤ 24h")}
	}
	if f.names, err = parseScenarios(*sc); err != nil {
		return f, err
	}
	if err := f.checkProcs(); err != nil {
		return f, err
	}
	if f.approaches, err = parseApproaches(*approaches); err != nil {
		return f, err
	}
	if err := f.parseShrink(*keep, *shrink); err != nil {
		return f, err
	}
	// A foil of a requested fault runs beside the default approaches: it
	// is what shows the fault bit.
	if *approaches == approachList(defaultApproaches) {
		f.approaches = append(f.approaches, foilsOf(f.faults)...)
	}
	return f, nil
}

// checkProcs refuses a --procs that does not divide every --clients, or
// that shares processes where a scenario or a fault cannot.
func (f compareFlags) checkProcs() error {
	if f.procs == 0 {
		return nil
	}
	for _, c := range f.clients {
		if f.procs < 1 || f.procs > c || c%f.procs != 0 {
			return usageError{fmt.Errorf("--procs %d: want a number that divides every --clients (%d)", f.procs, c)}
		}
		if f.procs == c {
			continue
		}
		for _, n := range f.names {
			if s, _ := engine.Lookup(n); !engine.SharesProcesses(s) {
				return usageError{fmt.Errorf("--procs %d: scenario %s runs one client per process", f.procs, n)}
			}
		}
		for _, x := range f.faults {
			if !slices.Contains(engine.ProcFaults(), x) {
				return usageError{fmt.Errorf("--procs %d: fault %s runs with one client per process (with several: %s)", f.procs, x, report.FaultList(engine.ProcFaults()))}
			}
		}
	}
	return nil
}

func faultList() string {
	var s []string
	for _, f := range engine.FaultNames() {
		s = append(s, string(f))
	}
	return strings.Join(s, ", ")
}

func approachList(as []engine.Approach) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = string(a)
	}
	return strings.Join(s, ",")
}

// defaultScenarios are the registered scenarios but those run on request
// only.
func defaultScenarios() []string {
	var out []string
	for _, sc := range engine.Scenarios() {
		if _, ok := sc.(engine.OnRequest); !ok {
			out = append(out, sc.Name())
		}
	}
	return out
}

// approachHelp lists every registered approach, each with the scenarios it
// is limited to, or the fault it runs under alone, when it is.
func approachHelp() string {
	var out []string
	all := engine.Names()
	for _, a := range engine.ApproachNames() {
		var in []string
		var foil engine.Fault
		for _, sc := range all {
			for _, d := range engine.Approaches(sc) {
				if d.Approach() != a {
					continue
				}
				in = append(in, sc)
				if fo, ok := d.(engine.Foil); ok {
					foil, _ = fo.FoilOf()
				}
			}
		}
		var notes []string
		if len(in) < len(all) {
			notes = append(notes, strings.Join(in, ", ")+" only")
		}
		if foil != "" {
			notes = append(notes, "under --faults "+string(foil)+" only, added to the default list there")
		}
		if len(notes) > 0 {
			out = append(out, string(a)+" ("+strings.Join(notes, "; ")+")")
		} else {
			out = append(out, string(a))
		}
	}
	return strings.Join(out, ", ")
}

// wants reports whether the chosen approaches (nil: all) include one
// whose clients need service.
func wants(as []engine.Approach, service string) bool {
	return as == nil || slices.ContainsFunc(engine.ApproachesNeeding(service), func(a engine.Approach) bool { return slices.Contains(as, a) })
}

// kafkaHelp names the approaches whose clients consume from Kafka, by
// scenario.
func kafkaHelp() string {
	var out []string
	for _, sc := range engine.Names() {
		var as []engine.Approach
		for _, d := range engine.Approaches(sc) {
			if _, ok := d.(engine.KafkaUser); ok {
				as = append(as, d.Approach())
			}
		}
		if len(as) > 0 {
			out = append(out, sc+": "+strings.ReplaceAll(approachList(as), ",", ", "))
		}
	}
	return strings.Join(out, "; ")
}

// foilsOf are the approaches that run under one of faults alone.
func foilsOf(faults []engine.Fault) []engine.Approach {
	var out []engine.Approach
	for _, sc := range engine.Names() {
		for _, d := range engine.Approaches(sc) {
			fo, ok := d.(engine.Foil)
			if !ok {
				continue
			}
			if f, _ := fo.FoilOf(); slices.Contains(faults, f) && !slices.Contains(out, d.Approach()) {
				out = append(out, d.Approach())
			}
		}
	}
	return out
}

// parseScenarios parses "all" or a comma-separated list of scenarios.
func parseScenarios(list string) ([]string, error) {
	if list == "all" || list == "" {
		return engine.Names(), nil
	}
	var names []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if _, ok := engine.Lookup(n); !ok {
			return nil, usageError{fmt.Errorf("unknown scenario %s (want %s, or all)", short.Quote(n), strings.Join(engine.Names(), ", "))}
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names, nil
}

// parseApproaches parses "all" (nil: every approach of each scenario) or a
// comma-separated list of approaches.
func parseApproaches(list string) ([]engine.Approach, error) {
	if list == "all" || list == "" {
		return nil, nil
	}
	known := engine.ApproachNames()
	var out []engine.Approach
	for _, n := range strings.Split(list, ",") {
		a := engine.Approach(strings.TrimSpace(n))
		if !slices.Contains(known, a) {
			return nil, usageError{fmt.Errorf("unknown approach %s (want %s, or all)", short.Quote(string(a)), strings.ReplaceAll(approachList(known), ",", ", "))}
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
		strings.Join(f.names, ","), approaches, report.IntList(f.clients), report.IntList(f.keys), f.duration, report.FaultList(f.faults), f.rounds)
	if f.metrics {
		s += " --metrics"
	}
	if f.seed != 0 {
		s += fmt.Sprintf(" --seed %d", f.seed)
	}
	if f.at == engine.AtInTx {
		s += " --at " + f.at
	}
	if f.kafkaCtl != "" {
		s += fmt.Sprintf(" --kafka-ctl %q", f.kafkaCtl) // the random schedules depend on it
	}
	if f.soak != 0 {
		s += fmt.Sprintf(" --soak %s", f.soak)
	}
	if f.keep != nil {
		s += " --keep " + report.IntList(f.keep)
	}
	if f.shrinkAll {
		s += " --shrink all"
	} else if f.shrink != nil {
		s += " --shrink " + approachList(f.shrink)
	}
	return s
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
	if f.seed == 0 && (f.soak != 0 || slices.Contains(f.faults, engine.Random)) {
		f.seed = rand.Uint64N(1<<53) + 1 // printable, and exact in JSON
		fmt.Fprintf(stderr, "lockfree: seed %d (--seed %d replays the runs' schedules)\n", f.seed, f.seed)
	}
	infra, cleanup, err := resolveBackend(ctx, f.pgURL, f.restartCmd, stderr)
	if err != nil {
		return err
	}
	defer cleanup()
	if slices.Contains(f.faults, engine.Failover) {
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
	if f.kafkaCtl != "" {
		infra.Brokers = engine.ShellBrokers(f.kafkaCtl)
	}
	if wants(f.approaches, "redis") {
		addr, stop := localredis.Resolve(ctx, f.redis, stderr)
		defer stop()
		infra.Redis = addr
	}
	if wants(f.approaches, "etcd") {
		endpoints, stop := localetcd.Resolve(ctx, f.etcd, stderr)
		defer stop()
		infra.Etcd = endpoints
	}
	var reports []report.Report
	var missed []error
	if f.soak != 0 {
		if reports, missed, err = soak(ctx, f, infra, stdout, stderr); err != nil {
			return err
		}
	} else if reports, missed, err = runPass(ctx, f, infra, time.Time{}, stdout, stderr); err != nil {
		return err
	}
	// A soak's passes are no sweep: its totals (soak) are its verdict.
	if !f.asJSON && f.soak == 0 {
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

// runPass runs every scenario of f at every size once, with f's seed,
// printing each report as it comes; none is begun after deadline, unless
// it is zero. missed holds the errors partial accepts; err is any other,
// which ends the pass.
func runPass(ctx context.Context, f compareFlags, infra engine.Infra, deadline time.Time, stdout, stderr io.Writer) (reports []report.Report, missed []error, err error) {
	for _, n := range f.names {
		s, _ := engine.Lookup(n)
		for _, c := range f.clients {
			for _, k := range f.keys {
				if !deadline.IsZero() && time.Now().After(deadline) {
					return reports, missed, nil
				}
				cfg := engine.Config{Clients: c, Procs: f.procs, Keys: k, Duration: f.duration, Faults: f.faults, Approaches: f.approaches,
					Metrics: f.metrics, Seed: f.seed, Keep: f.keep, At: f.at, KillBrokers: f.kafkaCtl != ""}
				rep, err := runPoint(ctx, s, cfg, infra, f.rounds, stderr)
				if err != nil && !partial(err) {
					return reports, missed, err
				}
				if err := f.shrinkResults(ctx, s, cfg, infra, &rep, stderr); err != nil {
					return reports, missed, err
				}
				missed = append(missed, err)
				reports = append(reports, rep)
				if err := printReport(stdout, rep, f.asJSON); err != nil {
					return reports, missed, err
				}
			}
		}
	}
	return reports, missed, nil
}

// writeList writes what scripts/results.sh reads, one line each: every
// scenario with its approaches, the folder of its package, its cost runs
// (engine.Coster), the faults its results show (engine.Shower), the faults
// that take effect in it, and every fault with its traits.
func writeList(w io.Writer) {
	for _, sc := range engine.Scenarios() {
		fmt.Fprintf(w, "scenario %s", sc.Name())
		for _, d := range engine.Approaches(sc.Name()) {
			fmt.Fprintf(w, " %s", d.Approach())
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "package %s %s\n", sc.Name(), strings.TrimPrefix(reflect.TypeOf(sc).PkgPath(), "github.com/lockfree-go/lockfree/"))
		if c, ok := sc.(engine.Coster); ok {
			for _, run := range c.CostRuns() {
				fmt.Fprintf(w, "cost %s %d %s\n", sc.Name(), run.Keys, run.What)
			}
		}
		if sh, ok := sc.(engine.Shower); ok {
			fmt.Fprintf(w, "shows %s", sc.Name())
			for _, f := range sh.Shows() {
				fmt.Fprintf(w, " %s", f)
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "applies %s", sc.Name())
		for _, f := range engine.FaultNames() {
			if engine.FaultApplies(f, sc.Name()) {
				fmt.Fprintf(w, " %s", f)
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "faults %s\n", strings.ReplaceAll(faultList(), ",", ""))
	for _, f := range engine.FaultNames() {
		fmt.Fprintf(w, "fault %s", f)
		if engine.Bites(f) {
			fmt.Fprint(w, " bites")
		}
		if engine.WholeRun(f) {
			fmt.Fprint(w, " whole-run")
		}
		fmt.Fprintln(w)
	}
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
	return errors.Is(err, engine.ErrNotInjected) || errors.Is(err, engine.ErrApproachFailed)
}

// runPoint runs every approach of s at one size: once, or --rounds times
// interleaved (round 1: every approach, round 2: every approach, …) so that
// a drift of the machine's load hits every approach alike. It returns the
// report with an error that partial accepts when a requested fault did not
// take effect somewhere or an approach failed. Live progress goes to stderr
// only when it is a terminal, closed before the caller prints on stdout.
func runPoint(ctx context.Context, s engine.Scenario, cfg engine.Config, infra engine.Infra, rounds int, stderr io.Writer) (report.Report, error) {
	if f, ok := stderr.(*os.File); ok && isTerminal(f) {
		live := report.NewTerminalProgress(stderr)
		defer live.Close()
		cfg.Live = live
	}
	if rounds == 1 {
		return engine.Run(ctx, s, cfg, infra)
	}
	var order []engine.Approach
	for _, d := range engine.Approaches(s.Name()) {
		if cfg.Approaches == nil || slices.Contains(cfg.Approaches, d.Approach()) {
			order = append(order, d.Approach())
		}
	}
	all := make([][]report.Report, rounds)
	var missed []error
	for r := range all {
		for _, a := range order {
			cfg.Approaches = []engine.Approach{a}
			rep, err := engine.Run(ctx, s, cfg, infra)
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
func resolveBackend(ctx context.Context, url, restartCmd string, stderr io.Writer) (engine.Infra, func(), error) {
	nothing := func() {}
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	if url != "" {
		infra := engine.Infra{URL: url}
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
		return engine.Infra{}, nothing, errors.New("no database: give --postgres or DATABASE_URL, or install PostgreSQL's server binaries (initdb, pg_ctl) for an embedded throwaway server")
	}
	fmt.Fprintln(stderr, "lockfree: no database given: starting a throwaway local PostgreSQL")
	srv, err := localpg.Start(ctx)
	if err != nil {
		return engine.Infra{}, nothing, err
	}
	return engine.Infra{URL: srv.URL, Restart: srv.Restart}, srv.Stop, nil
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
