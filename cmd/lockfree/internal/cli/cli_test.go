package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/cli"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	_ "github.com/lockfree-go/lockfree/cmd/lockfree/internal/scenario" // every scenario, registered
	"github.com/lockfree-go/lockfree/internal/testdb"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestMain lets `lockfree compare` re-execute this test binary as its
// worker processes.
func TestMain(m *testing.M) {
	if engine.IsWorker() {
		os.Exit(engine.WorkerMain())
	}
	os.Exit(m.Run())
}

func TestCompareJSONShape(t *testing.T) {
	db := testdb.New(t)
	chart := filepath.Join(t.TempDir(), "chart.svg")
	md := filepath.Join(t.TempDir(), "report.md")
	code, out, errs := run(t, "compare", "--postgres", db.URL, "--scenario", "inventory", "--duration", "300ms",
		"--approaches", "alternative,fenced-lock,naive-lock,raw",
		"--clients", "2", "--faults", "none", "--json", "--chart", chart, "--markdown", md)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rep); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"scenario", "backend", "clients", "keys", "duration_s", "faults", "results"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("missing %q in %s", k, out)
		}
	}
	results := rep["results"].([]any)
	if len(results) != 4 {
		t.Fatalf("results = %v, want the four approaches", results)
	}
	for _, r := range results {
		for _, k := range []string{"approach", "label", "ops", "ops_per_sec", "p50_ms", "p99_ms", "retries", "rejected",
			"violations", "round_trips_per_op", "statements_per_op"} {
			if _, ok := r.(map[string]any)[k]; !ok {
				t.Errorf("result lacks %q: %v", k, r)
			}
		}
	}
	if !strings.Contains(errs, "backend postgres") || strings.Contains(errs, " ops after ") {
		t.Errorf("stderr: want the backend and no progress lines off a terminal: %q", errs)
	}
	for _, f := range []string{chart, md} {
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

// TestCompareSweepRounds sweeps clients with interleaved rounds: one JSON
// report per point, each with its rounds' ratios, and an HTML report with
// the sweep's charts.
func TestCompareSweepRounds(t *testing.T) {
	db := testdb.New(t)
	html := filepath.Join(t.TempDir(), "report.html")
	code, out, errs := run(t, "compare", "--postgres", db.URL, "--scenario", "inventory", "--duration", "200ms",
		"--approaches", "alternative,fenced-lock", "--clients", "1,2", "--rounds", "2", "--faults", "none", "--json", "--html", html)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d JSON lines, want one per point (2):\n%s", len(lines), out)
	}
	var points []string
	for _, l := range lines {
		var rep struct {
			Clients, Keys int
			Rounds        struct {
				N      int
				Ratios []struct{ Of, To string }
			}
			Results []struct {
				Approach        string
				Checked         bool
				RoundsOpsPerSec []float64 `json:"rounds_ops_per_sec"`
			}
		}
		if err := json.Unmarshal([]byte(l), &rep); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		points = append(points, fmt.Sprintf("%dx%d", rep.Clients, rep.Keys))
		if rep.Rounds.N != 2 || len(rep.Rounds.Ratios) == 0 || rep.Rounds.Ratios[0].To != "fenced-lock" {
			t.Errorf("rounds = %+v", rep.Rounds)
		}
		if len(rep.Results) != 2 {
			t.Errorf("%d results, want the two approaches asked for", len(rep.Results))
		}
		for _, r := range rep.Results {
			if len(r.RoundsOpsPerSec) != 2 || !r.Checked {
				t.Errorf("%s: rounds %v checked %v", r.Approach, r.RoundsOpsPerSec, r.Checked)
			}
		}
	}
	if got := strings.Join(points, " "); got != "1x1 2x1" {
		t.Errorf("points = %s", got)
	}
	b, err := os.ReadFile(html)
	if err != nil || !strings.Contains(string(b), "inventory: sweep") || !strings.Contains(string(b), "line-chart") {
		t.Errorf("HTML report lacks the sweep: %v", err)
	}
}

// TestCompareTextVerdict: under real pauses the naive lock shows anomalies, and
// the text output ends with the verdict and the closing paragraph, after
// the table with its round trips per operation.
func TestCompareTextVerdict(t *testing.T) {
	db := testdb.New(t)
	code, out, errs := run(t, "compare", "--postgres", db.URL, "--scenario", "inventory", "--duration", "2s",
		"--approaches", "alternative,naive-lock", "--clients", "4", "--faults", "pause")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	table, verdict := strings.Index(out, "round trips/op"), strings.Index(out, "\nverdict\n")
	if table < 0 || verdict < table || !strings.Contains(out[verdict:], "inventory: naive-lock showed") ||
		!strings.Contains(out[verdict:], "Every table") {
		t.Errorf("output:\n%s", out)
	}
}

// TestCompareSoak: a soak shorter than one pass still runs one, and ends
// with its totals by scenario and approach, the seed of the pass named.
func TestCompareSoak(t *testing.T) {
	db := testdb.New(t)
	code, out, errs := run(t, "compare", "--postgres", db.URL, "--scenario", "inventory", "--duration", "2s",
		"--approaches", "alternative,naive-lock", "--clients", "3", "--faults", "random", "--seed", "7", "--soak", "1ms")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	if !strings.Contains(errs, "soak pass 1, seed 7") || strings.Contains(errs, "soak pass 2") {
		t.Errorf("stderr: want pass 1 with seed 7 alone:\n%s", errs)
	}
	i := strings.Index(out, "Soak: 1 passes in ")
	if i < 0 || !strings.Contains(out[i:], "seeds 7–7") {
		t.Fatalf("no soak totals:\n%s", out)
	}
	if !strings.Contains(out[i:], "| inventory | alternative | 1 | 1 | ") || !strings.Contains(out[i:], "| inventory | naive-lock | 1 | 1 | ") {
		t.Errorf("totals lack a checked run of each approach:\n%s", out[i:])
	}
	if strings.Contains(out, "sweep over") || strings.Contains(out, "\nverdict") {
		t.Errorf("a soak's passes printed as a sweep, or a verdict besides its totals:\n%s", out)
	}
	for _, l := range strings.Split(out[i:], "\n") {
		if f := strings.Split(l, " | "); strings.HasPrefix(l, "| inventory | alternative |") && (len(f) < 6 || f[5] != "0") {
			t.Errorf("the alternative's violations under random faults: %s", l)
		}
	}
}

// A violation under a random schedule is shrunk (--shrink) to injections
// numbered in the draw, and --keep replays exactly those.
func TestCompareShrink(t *testing.T) {
	db := testdb.New(t)
	args := []string{"compare", "--postgres", db.URL, "--scenario", "inventory", "--approaches", "naive-lock", "--clients", "6",
		"--duration", "4s", "--faults", "random", "--seed", "7", "--json"}
	result := func(out string) report.Result {
		t.Helper()
		var rep report.Report
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rep); err != nil || len(rep.Results) != 1 {
			t.Fatalf("want one JSON report of one result: %v\n%s", err, out)
		}
		return rep.Results[0]
	}
	_, out, errs := run(t, append(args, "--shrink", "naive-lock")...)
	r := result(out)
	for i, in := range r.Schedule {
		if in.N != i {
			t.Errorf("injection %d of the whole schedule is numbered %d", i, in.N)
		}
	}
	keep := []int{0, 2}
	switch {
	case r.Violations == 0:
		t.Logf("no violations to shrink in this run:\n%s", errs)
	case r.Shrunk == nil || len(r.Shrunk.Keep) == 0 || r.Shrunk.Runs < 1 || r.Shrunk.Violations == 0:
		t.Errorf("%d violations, shrunk to %+v:\n%s", r.Violations, r.Shrunk, errs)
	default:
		keep = r.Shrunk.Keep
		t.Logf("shrunk to %v in %d runs", keep, r.Shrunk.Runs)
	}
	_, out, errs = run(t, append(args, "--keep", report.IntList(keep))...)
	r = result(out)
	var played []int
	for _, in := range r.Schedule {
		played = append(played, in.N)
	}
	if !slices.Equal(played, keep) || !slices.Equal(r.Keep, keep) {
		t.Errorf("--keep %v played %v, reported keep %v:\n%s", keep, played, r.Keep, errs)
	}
}

func TestBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"compare", "--scenario", "nope"},
		{"compare", "--faults", "fire"},
		{"compare", "--clients", "0"},
		{"compare", "--clients", "1,x"},
		{"compare", "--clients", "4,4"},
		{"compare", "--keys", "1,0"},
		{"compare", "--rounds", "0"},
		{"compare", "--backend", "postgres"},
		{"compare", "--out", "report.md"},
		{"compare", "--nosuchflag"},
		{"compare", "--approaches", "alternative,nope"},
		{"compare", "--scenario", "inventory,nope"},
		{"compare", "--faults", "partition"},
		{"compare", "--faults", "random,pause"},
		{"compare", "--seed", "-1"},
		{"compare", "--soak", "-1s"},
		{"compare", "--soak", "25h"},
		{"compare", "--keep", "1"},
		{"compare", "--faults", "random", "--shrink", "nope"},
		{"migrate"},
		{"migrate", "print", "--packages", "fencedlock,nosuch"},
		{"frobnicate"},
	} {
		if code, _, _ := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestMigrate(t *testing.T) {
	code, out, _ := run(t, "migrate", "print", "--prefix", "lf_", "--schema", "app")
	if code != 0 || !strings.Contains(out, `"app"."lf_locks"`) {
		t.Fatalf("migrate print: %d\n%s", code, out)
	}
	code, out, _ = run(t, "migrate", "print", "--packages", "fencedlock")
	if code != 0 || !strings.Contains(out, `"lockfree_locks"`) || strings.Contains(out, "idempotency") {
		t.Fatalf("migrate print --packages fencedlock: %d\n%s", code, out)
	}
	db := testdb.New(t)
	if code, _, errs := run(t, "migrate", "up", "--postgres", db.URL, "--packages", "fencedlock"); code != 0 {
		t.Fatalf("migrate up --packages fencedlock: %d %s", code, errs)
	}
	for i := 0; i < 2; i++ { // the second run finds nothing to do
		if code, _, errs := run(t, "migrate", "up", "--postgres", db.URL); code != 0 {
			t.Fatalf("migrate up: %d %s", code, errs)
		}
	}
	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM lockfree_locks`).Scan(&n); err != nil {
		t.Fatalf("the lock table is missing after migrate up: %v", err)
	}
}

// TestComparePostgresConnectionStrings runs compare against PostgreSQL given
// as a key/value DSN and as a URL with ?password=, under the delay fault
// (each worker's proxy needs the server's address out of either form): the run must
// work, and no output may show the password.
func TestComparePostgresConnectionStrings(t *testing.T) {
	base := testdb.URL(t)
	cfg, err := pgconn.ParseConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	password := cfg.Password
	if password == "" {
		password = "s3cr3t-never-printed" // the server trusts us; a password is sent anyway
	}
	quote := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace
	kv := fmt.Sprintf("host=%s port=%d user='%s' password='%s' dbname='%s' sslmode=disable",
		cfg.Host, cfg.Port, quote(cfg.User), quote(password), quote(cfg.Database))
	u := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable&password=%s",
		url.User(cfg.User), net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), url.PathEscape(cfg.Database), url.QueryEscape(password))
	want := fmt.Sprintf("backend postgres at %s/%s", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), cfg.Database)
	for name, conn := range map[string]string{"key/value": kv, "URL": u} {
		code, out, errs := run(t, "compare", "--postgres", conn, "--scenario", "inventory",
			"--approaches", "naive-lock", "--duration", "2s", "--clients", "3", "--faults", "delay", "--json")
		if code != 0 {
			t.Errorf("%s: exit %d: %s", name, code, errs)
		}
		if strings.Contains(out+errs, password) {
			t.Errorf("%s: the output shows the password:\n%s\n%s", name, out, errs)
		}
		if !strings.Contains(errs, want) {
			t.Errorf("%s: stderr lacks %q:\n%s", name, want, errs)
		}
	}
}

// TestCompareList: --list prints the registry that scripts/results.sh runs:
// every scenario with its approaches, in report order, the folder of its
// package and the faults that apply to it; then the faults, each with its
// traits.
func TestCompareList(t *testing.T) {
	code, out, errs := run(t, "compare", "--list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	byKind := map[string][][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		byKind[f[0]] = append(byKind[f[0]], f)
	}
	names := engine.Names()
	for kind, min := range map[string]int{"scenario": 3, "package": 3, "applies": 2} {
		lines := byKind[kind]
		if len(lines) != len(names) {
			t.Fatalf("%d %s lines, want one per scenario:\n%s", len(lines), kind, out)
		}
		for i, n := range names {
			if f := lines[i]; len(f) < min || f[1] != n {
				t.Errorf("%s line %d = %q, want %s", kind, i, f, n)
			}
		}
	}
	if p := byKind["package"][0]; p[2] != "cmd/lockfree/internal/scenario/"+names[0] {
		t.Errorf("package line %q, want the scenario's folder", p)
	}
	if f := byKind["faults"]; len(f) != 1 || len(f[0]) != len(engine.FaultNames())+1 || f[0][1] != "pause" {
		t.Errorf("faults lines %q", f)
	}
	if f := byKind["fault"]; len(f) != len(engine.FaultNames()) || !slices.Equal(f[0], []string{"fault", "pause", "bites"}) {
		t.Errorf("fault lines %q", f)
	}
}
