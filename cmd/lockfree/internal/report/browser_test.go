package report_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/cli"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write docs/img/report.png from the fixture")

// browser returns Chromium's path: $LOCKFREE_CHROMIUM, else the first of
// the usual names on PATH. Without one the test skips, and fails under
// CI=true (`make test` installs it with scripts/chromium.sh).
func browser(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LOCKFREE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "headless_shell", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium on PATH: run scripts/chromium.sh (make test does)")
	}
	t.Skip("no Chromium on PATH (scripts/chromium.sh installs it)")
	return ""
}

// page is a report loaded in headless Chromium.
type page struct {
	ctx context.Context
	mu  sync.Mutex
	// problems are console errors and uncaught exceptions.
	problems []string
}

// open starts Chromium on this machine's closed network (nothing in the
// background may call out) and loads the file at path.
func open(t *testing.T, path string, width int) *page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser(t)), chromedp.NoSandbox, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, 900),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-gpu", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	p := &page{}
	// Listen starts the browser with no deadline, before anything is
	// loaded, so that no early message is lost.
	err := chromedp.Listen(bctx, func(ev any) {
		p.mu.Lock()
		defer p.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				p.problems = append(p.problems, fmt.Sprintf("console.error %v", ev.Args))
			}
		case *runtime.EventExceptionThrown:
			msg := ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				msg = ev.ExceptionDetails.Exception.Description
			}
			p.problems = append(p.problems, "exception: "+msg)
		}
	})
	if err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, time.Minute)
	t.Cleanup(cancel)
	p.ctx = ctx
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+path), chromedp.WaitVisible(chromedp.CSS("#verdict"))); err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	return p
}

// count returns how many elements match sel and have a non-empty box.
func (p *page) count(t *testing.T, sel string) int {
	t.Helper()
	n, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](fmt.Sprintf(
		`[...document.querySelectorAll(%q)].filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 }).length`, sel)))
	if err != nil {
		t.Fatalf("counting %s: %v", sel, err)
	}
	return n
}

// check fails the test unless at least want elements match sel with a
// non-empty box.
func (p *page) check(t *testing.T, sel string, want int) {
	t.Helper()
	if n := p.count(t, sel); n < want {
		t.Errorf("%d visible elements match %s, want at least %d", n, sel, want)
	}
}

// finish checks that the page loaded nothing from anywhere and logged no
// error, and saves a full-page screenshot as an artifact.
func (p *page) finish(t *testing.T, name string) []byte {
	t.Helper()
	fetched, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]string](`performance.getEntriesByType("resource").map(e => e.name)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(fetched) > 0 {
		t.Errorf("the report fetched %v: it must be self-contained", fetched)
	}
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("LOCKFREE_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, name+".png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.problems {
		t.Errorf("page: %s", pr)
	}
	return png
}

func writeHTML(t *testing.T, reps []report.Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := report.WriteHTML(&b, reps, report.HTMLOptions{Command: "lockfree compare --scenario inventory --faults pause"}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReportInBrowserFixture loads the report of a realistic fixture, with
// violations, timelines, rounds and a sweep, and checks that each part
// renders.
func TestReportInBrowserFixture(t *testing.T) {
	reps := report.Fixture(true)
	p := open(t, writeHTML(t, reps), 1280)
	p.check(t, "#verdict .card", 3) // inventory, documents, and the accounts sweep
	p.check(t, "section.scenario details", 12)
	p.check(t, "#verdict .card.lost", 2)    // inventory's and documents' naive lock
	p.check(t, "table.results tbody tr", 9) // the sweep's tables are folded
	p.check(t, "svg.bar-chart rect.bar", 4)
	p.check(t, "svg.line-chart polyline", 4)
	p.check(t, `figure.timeline[data-approach="naive-lock"] .mark.violation`, 4)
	p.check(t, `figure.timeline[data-approach="naive-lock"] path.clobber-link`, 4)
	p.check(t, `figure.timeline[data-approach="naive-lock"] .mark.clobbered`, 4)
	p.check(t, `figure.timeline[data-approach="fenced-lock"] path.mark.rejected`, 4)
	p.check(t, `figure.timeline .span.lease`, 20)
	p.check(t, `figure.timeline .span.pause`, 4)
	if n := p.count(t, `figure.timeline[data-approach="fenced-lock"] .mark.violation`); n != 0 {
		t.Errorf("the fenced lock's timeline shows %d violations, want 0", n)
	}
	// The first timeline is the one that lost data.
	first, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.querySelector("figure.timeline").dataset.approach`))
	if err != nil || first != "naive-lock" {
		t.Errorf("first timeline = %q (%v), want naive-lock", first, err)
	}
	p.finish(t, "report-fixture")
}

// TestReportInBrowserRealRun produces a report with a real short run of
// the harness (worker processes re-executed from this test binary, real
// pauses) and checks that its tables, charts and verdict render.
func TestReportInBrowserRealRun(t *testing.T) {
	browser(t) // skip before the run when there is no browser
	path := filepath.Join(t.TempDir(), "run.html")
	var stdout, stderr bytes.Buffer
	db := testdb.New(t)
	code := cli.Main(context.Background(), []string{"compare", "--postgres", db.URL, "--scenario", "inventory",
		"--duration", "2s", "--clients", "4", "--faults", "pause", "--html", path}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("compare: exit %d\n%s", code, stderr.String())
	}
	p := open(t, path, 1280)
	p.check(t, "#verdict .card", 1)
	p.check(t, "table.results tbody tr", 4)
	p.check(t, "svg.bar-chart rect.bar", 4)
	verdict, err := chromedp.Run(p.ctx, chromedp.Text(chromedp.CSS("#verdict .card")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(verdict, "inventory") || !strings.Contains(verdict, "Injected: pause") {
		t.Errorf("verdict card = %q, want the scenario and the pauses injected", verdict)
	}
	p.finish(t, "report-run")
}

// TestReportScreenshot renders the README's screenshot from the fixture
// (without the sweep); -update-screenshot writes it to docs/img/report.png:
//
//	go test -run TestReportScreenshot ./internal/report -update-screenshot
func TestReportScreenshot(t *testing.T) {
	reps := report.Fixture(false)[:1]
	p := open(t, writeHTML(t, reps), 1200)
	p.check(t, "figure.timeline", 3)
	png := p.finish(t, "report")
	if *updateScreenshot {
		if err := os.WriteFile(filepath.Join("..", "..", "..", "..", "docs", "img", "report.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
