package report

import (
	"bytes"
	"encoding/xml"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTableShowsUncheckedAsDash(t *testing.T) {
	rep := inventoryReport()
	rep.Results[3].Checked = false
	rep.Results[1].RoundTripsPerOp = Float(5)
	rep.Results[0].Extra = map[string]float64{"replays": 7}
	var b bytes.Buffer
	WriteTable(&b, rep)
	lines := strings.Split(b.String(), "\n")
	var head, raw, alt string
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && f[0] == "approach":
			head = l
		case len(f) > 0 && f[0] == "raw" && raw == "":
			raw = l
		case len(f) > 0 && f[0] == "alternative" && alt == "":
			alt = l
		}
	}
	for _, col := range []string{"round trips/op", "replays", "faults injected", "violations"} {
		if !strings.Contains(head, col) {
			t.Errorf("header lacks %q: %s", col, head)
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(raw), "—") {
		t.Errorf("unchecked raw row does not end in —: %q", raw)
	}
	if !strings.Contains(alt, "pause 14") || !strings.Contains(alt, " 7 ") {
		t.Errorf("alternative row lacks its faults or extra: %q", alt)
	}
	rep.Results[0].TakenOver = map[Fault]int64{"pause": 9}
	b.Reset()
	WriteTable(&b, rep)
	if !strings.Contains(b.String(), "pause 14 (9 taken over)") {
		t.Errorf("the alternative's row lacks its takeovers:\n%s", b.String())
	}
	var md bytes.Buffer
	md.WriteString(Markdown([]Report{rep}))
	if !strings.Contains(md.String(), "| raw |") || !strings.Contains(md.String(), "| — |") || !strings.Contains(md.String(), "**Verdict.**") {
		t.Errorf("markdown:\n%s", md.String())
	}
	if first := strings.SplitN(md.String(), "\n", 4); first[0] != "### inventory" || first[1] != "" || !strings.HasPrefix(first[2], "backend postgres") {
		t.Errorf("markdown starts %q: scripts/results.sh cuts its first three lines", first[:3])
	}
}

func TestWriteVerdictsWraps(t *testing.T) {
	var b bytes.Buffer
	WriteVerdicts(&b, []Report{inventoryReport()}, 80)
	for _, l := range strings.Split(b.String(), "\n") {
		if len([]rune(l)) > 80 {
			t.Errorf("line of %d runes: %q", len([]rune(l)), l)
		}
	}
	if !strings.Contains(b.String(), "naive-lock showed 37") {
		t.Errorf("verdicts:\n%s", b.String())
	}
}

// TestHTMLSelfContained checks the page loads nothing: no script, link,
// import or URL other than in-page references and the SVG namespace.
func TestHTMLSelfContained(t *testing.T) {
	var b bytes.Buffer
	if err := WriteHTML(&b, Fixture(true), HTMLOptions{}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, bad := range []string{"<script", "<link", "@import", "<img", "<iframe"} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %s", bad)
		}
	}
	for _, u := range regexp.MustCompile(`(?i)(?:https?:)?//[a-z0-9.-]+`).FindAllString(page, -1) {
		if u != "http://www.w3.org" {
			t.Errorf("page refers to %s", u)
		}
	}
	for _, want := range []string{`id="verdict"`, `class="timeline-svg"`, `class="line-chart"`, "tied with raw SQL", "first executions"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
}

// TestHTMLEscapes feeds markup through every user-visible string.
func TestHTMLEscapes(t *testing.T) {
	evil := `<b onmouseover="x">&`
	rep := inventoryReport()
	rep.Scenario, rep.Notes = evil, []string{evil}
	rep.Results[0].Label, rep.Results[0].Detail = evil, evil
	rep.Results[0].Timeline = &Timeline{End: 1, Lanes: []Lane{{Name: evil, Spans: []Span{{Kind: SpanLease, End: 1, Label: evil}},
		Marks: []Mark{{Kind: MarkWrite, At: 0.5, Key: evil, Label: evil}}}}}
	var b bytes.Buffer
	if err := WriteHTML(&b, []Report{rep}, HTMLOptions{Command: evil}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "<b onmouseover") {
		t.Error("markup from a report reached the page unescaped")
	}
	svg := SVGChart([]Report{rep})
	if err := xml.Unmarshal([]byte(svg), new(any)); err != nil {
		t.Errorf("SVG chart is not well-formed: %v", err)
	}
}

func TestSVGChartWellFormed(t *testing.T) {
	svg := SVGChart(Fixture(false))
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
	}
	if !strings.Contains(svg, "4 violations") || !strings.Contains(svg, "skipped") {
		t.Error("chart lacks the violations or the skipped approach")
	}
}

// fakeClock is a settable clock for the plain progress.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestPlainProgress(t *testing.T) {
	var b bytes.Buffer
	clock := &fakeClock{t: time.Unix(0, 0)}
	p := NewPlainProgress(&b).(*plainProgress)
	p.now = clock.now
	task := p.Start("inventory", FencedLock, 10*time.Second)
	for i := 1; i <= 10; i++ { // one update a second for 10 s
		clock.add(time.Second)
		task.Update(int64(100*i), int64(i/3))
	}
	task.Done(Result{Approach: FencedLock, Ops: 1000, OpsPerSec: 100, Checked: true, FaultsInjected: map[Fault]int64{"pause": 3}})
	task.Update(2000, 9) // after Done: ignored
	task.Done(Result{})
	want := "inventory/fenced-lock: 500 ops, 1 faults after 5.0s of 10.0s\n" +
		"inventory/fenced-lock: 1000 ops, 3 faults after 10.0s of 10.0s\n" +
		"inventory/fenced-lock: 1000 ops in 10.0s (100 ops/s), 3 faults, violations 0\n"
	if b.String() != want {
		t.Errorf("plain progress:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestTerminalProgress draws live lines into a buffer: a run's line ends
// with its outcome, even when the run outlasted its total (checks take
// time) and its last update was drawn first.
func TestTerminalProgress(t *testing.T) {
	var b syncBuffer
	p := NewTerminalProgress(&b)
	task := p.Start("inventory", Alternative, time.Second)
	task.(*terminalTask).start = time.Now().Add(-time.Hour)
	task.Update(10, 1)
	for deadline := time.Now().Add(time.Minute); !strings.Contains(b.String(), "10 ops"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the update was never drawn:\n%q", b.String())
		}
	}
	task.Done(Result{Approach: Alternative, Ops: 42, Checked: true})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if last := out[strings.LastIndex(out, "inventory/alternative"):]; !strings.Contains(last, "42 ops") {
		t.Errorf("the line's last frame is %q, want the outcome (42 ops)", last)
	}
}

// TestTerminalProgressCloseUnfinished: Close returns even when a run never
// reported Done (the harness failed mid-run).
func TestTerminalProgressCloseUnfinished(t *testing.T) {
	var b syncBuffer
	p := NewTerminalProgress(&b)
	p.Start("inventory", NaiveLock, time.Second).Update(5, 0)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "inventory/naive-lock") {
		t.Errorf("drew %q", b.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWriteGlance: the grid sums a scenario's reports per approach, shows —
// for an unchecked result, and the sentence says what each approach got
// wrong where in the words of the scenario's verdict.
func TestWriteGlance(t *testing.T) {
	inv := inventoryReport()
	docs := inventoryReport()
	docs.Scenario = "documents"
	docs.Results[2].Violations = 0
	docs.Results[3].Checked = false
	var b bytes.Buffer
	WriteGlance(&b, []Report{inv, inv, docs}, 100)
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) < 4 {
		t.Fatalf("want a header, two scenarios and a sentence:\n%s", b.String())
	}
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "violations alternative fenced-lock naive-lock raw" {
		t.Errorf("header %q", lines[0])
	}
	if f := strings.Fields(lines[1]); strings.Join(f, " ") != "inventory 0 0 74 0" {
		t.Errorf("inventory row %q: want the two reports summed", lines[1])
	}
	if f := strings.Fields(lines[2]); strings.Join(f, " ") != "documents 0 0 0 —" {
		t.Errorf("documents row %q", lines[2])
	}
	sentence := strings.Join(strings.Fields(strings.Join(lines[3:], " ")), " ")
	want := "naive-lock showed 74 anomalies in inventory (1 of 2 scenarios); alternative and fenced-lock: nothing wrong in any scenario; raw: not checked everywhere (—), nothing found where checked."
	if sentence != want {
		t.Errorf("sentence %q, want %q", sentence, want)
	}
}

// TestRoundTripsInEveryTable: the text, Markdown and sweep tables show the
// round trips per operation, and "—" for a result that has none measured.
func TestRoundTripsInEveryTable(t *testing.T) {
	rep := inventoryReport()
	rep.Results[0].RoundTripsPerOp, rep.Results[0].StatementsPerOp = Float(1), Float(1)
	var text bytes.Buffer
	WriteTable(&text, rep)
	md := Markdown([]Report{rep})
	for name, out := range map[string]string{"text": text.String(), "markdown": md} {
		if !strings.Contains(out, "round trips/op") || !strings.Contains(out, "statements/op") {
			t.Errorf("%s table lacks the round trips:\n%s", name, out)
		}
	}
	other := rep
	other.Clients = 32
	var sweep bytes.Buffer
	WriteSweep(&sweep, Sweeps([]Report{rep, other})[0])
	if !strings.Contains(sweep.String(), "rt/op") || !strings.Contains(sweep.String(), "1.00") {
		t.Errorf("sweep table lacks the round trips:\n%s", sweep.String())
	}
	if !strings.Contains(Markdown([]Report{rep, other}), "alternative round trips/op") {
		t.Error("Markdown sweep lacks the round trips")
	}
}

// A scenario's own count that is a rate per operation reads to two
// decimals, a whole count as it is.
func TestExtraText(t *testing.T) {
	for v, want := range map[float64]string{7.126392829242219: "7.13", 12: "12", 0: "0", 0.5: "0.50"} {
		if got := extraText(v); got != want {
			t.Errorf("extraText(%v) = %q, want %q", v, got, want)
		}
	}
}
