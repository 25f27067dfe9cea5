package report

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"
)

// Progress follows the runs of a comparison as the harness makes them, so
// that the harness need not know whether a person watches a terminal. Its
// methods are safe for concurrent use.
type Progress interface {
	// Start announces that approach a of scenario starts a run of total.
	Start(scenario string, a Approach, total time.Duration) Task
}

// Task is one run followed by a Progress. Its methods are safe for
// concurrent use; Update after Done is ignored.
type Task interface {
	// Update reports the operations acknowledged and the faults injected
	// so far (totals, not increments).
	Update(ops, faults int64)
	// Done reports the run's result, invariants checked or not.
	Done(res Result)
}

// ProgressWriter is a Progress that owns its output: messages for the
// person watching go through Write so that they do not tear a live line,
// and Close waits until everything is drawn.
type ProgressWriter interface {
	Progress
	io.Writer
	Close() error
}

// NewProgress returns live, redrawn lines when w is a terminal and plain
// lines otherwise (see [NewPlainProgress]).
func NewProgress(w io.Writer) ProgressWriter {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return NewTerminalProgress(w)
	}
	return NewPlainProgress(w)
}

// PlainInterval is how often, at most, a plain progress line is printed for
// a run that goes on.
const PlainInterval = 5 * time.Second

// NewPlainProgress prints, for logs and CI, at most one line per run every
// PlainInterval while it goes on, and one line when it ends.
func NewPlainProgress(w io.Writer) ProgressWriter {
	return &plainProgress{w: w, now: time.Now}
}

type plainProgress struct {
	mu  sync.Mutex // serialises writes to w
	w   io.Writer
	now func() time.Time
}

func (p *plainProgress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.w.Write(b)
}

func (p *plainProgress) Close() error { return nil }

func (p *plainProgress) Start(scenario string, a Approach, total time.Duration) Task {
	t := &plainTask{p: p, name: fmt.Sprintf("%s/%s", scenario, a), total: total, start: p.now()}
	t.last = t.start
	return t
}

type plainTask struct {
	p     *plainProgress
	name  string
	total time.Duration
	start time.Time

	mu   sync.Mutex
	last time.Time
	done bool
}

func (t *plainTask) Update(ops, faults int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.p.now()
	if t.done || now.Sub(t.last) < PlainInterval {
		return
	}
	t.last = now
	fmt.Fprintf(t.p, "%s: %d ops, %d faults after %s of %s\n", t.name, ops, faults, seconds(now.Sub(t.start)), seconds(t.total))
}

func (t *plainTask) Done(res Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	fmt.Fprintf(t.p, "%s: %s\n", t.name, outcome(res, t.p.now().Sub(t.start)))
}

// outcome is the one-line summary of a finished run.
func outcome(res Result, took time.Duration) string {
	if !res.Ran() {
		return res.why()
	}
	var faults int64
	for _, n := range res.Faults() {
		faults += n
	}
	return fmt.Sprintf("%d ops in %s (%.0f ops/s), %d faults, violations %s", res.Ops, seconds(took), res.OpsPerSec, faults, violations(res))
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// NewTerminalProgress draws one live line per run with mpb, redrawn in
// place: scenario and approach, a bar of elapsed over total time, and the
// operations and faults so far. A finished run's line stays, with its
// outcome. It redraws even when w is not a terminal.
func NewTerminalProgress(w io.Writer) ProgressWriter {
	return &terminalProgress{p: mpb.New(mpb.WithOutput(w), mpb.WithAutoRefresh(), mpb.WithWidth(100), mpb.WithRefreshRate(150*time.Millisecond))}
}

type terminalProgress struct {
	p     *mpb.Progress
	mu    sync.Mutex
	tasks []*terminalTask
}

func (t *terminalProgress) Write(b []byte) (int, error) { return t.p.Write(b) }

// Close ends the lines of runs that never reported Done (the harness failed
// mid-run), so that waiting for the container cannot hang, and waits until
// the last frame is drawn.
func (t *terminalProgress) Close() error {
	t.mu.Lock()
	for _, task := range t.tasks {
		if task.done.CompareAndSwap(false, true) {
			task.bar.Abort(false)
		}
	}
	t.mu.Unlock()
	t.p.Wait()
	return nil
}

func (t *terminalProgress) Start(scenario string, a Approach, total time.Duration) Task {
	task := &terminalTask{start: time.Now(), total: total}
	name := fmt.Sprintf("%-24s", scenario+"/"+string(a))
	task.bar = t.p.New(max(int64(total/time.Millisecond), 1), mpb.BarStyle().Lbound("[").Filler("=").Tip(">").Padding(" ").Rbound("]"),
		mpb.PrependDecorators(decor.Name(name, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Any(task.status, decor.WCSyncSpace)),
		mpb.BarFillerClearOnComplete(),
	)
	t.mu.Lock()
	t.tasks = append(t.tasks, task)
	t.mu.Unlock()
	return task
}

type terminalTask struct {
	bar         *mpb.Bar
	start       time.Time
	total       time.Duration
	ops, faults atomic.Int64
	final       atomic.Pointer[string]
	done        atomic.Bool
}

// status is the text right of the bar; mpb calls it on each redraw.
func (t *terminalTask) status(decor.Statistics) string {
	if f := t.final.Load(); f != nil {
		return *f
	}
	return fmt.Sprintf("%s/%s  %d ops  %d faults", seconds(time.Since(t.start)), seconds(t.total), t.ops.Load(), t.faults.Load())
}

func (t *terminalTask) Update(ops, faults int64) {
	if t.done.Load() {
		return
	}
	t.ops.Store(ops)
	t.faults.Store(faults)
	// Short of the total: reaching it would complete the bar, and only Done
	// may, with the outcome.
	t.bar.SetCurrent(min(int64(time.Since(t.start)/time.Millisecond), int64(t.total/time.Millisecond)-1))
}

func (t *terminalTask) Done(res Result) {
	if !t.done.CompareAndSwap(false, true) {
		return
	}
	s := outcome(res, time.Since(t.start))
	t.final.Store(&s)
	t.bar.SetTotal(-1, true)
}
