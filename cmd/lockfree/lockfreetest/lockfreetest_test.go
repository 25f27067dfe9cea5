package lockfreetest_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockfree-go/lockfree/cmd/lockfree/lockfreetest"
)

// short is counterTest for 2 s: each run proves its claim in that time.
func short(fenced bool, faults ...lockfreetest.Fault) lockfreetest.Test[struct{}, int64] {
	test := counterTest(fenced, faults...)
	test.Duration = 2 * time.Second
	return test
}

// The foil: a naive lease lock loses increments when its holder is paused
// past the lease between its read and its write.
// Its report's HTML page draws the workers' timeline.
func TestNaiveLockLosesIncrements(t *testing.T) {
	t.Parallel()
	test := short(false, lockfreetest.Pause)
	test.HTML = filepath.Join(t.TempDir(), "report.html")
	rep := lockfreetest.Run(t, test)
	if rep.Faults[lockfreetest.Pause] == 0 || len(rep.Violations) == 0 {
		t.Fatalf("naive lock under pause: %s; want a lost increment", rep.Summary())
	}
	t.Log(rep.Violations[0])
	if page := readFile(t, test.HTML); !strings.Contains(page, `<figure class="timeline" data-approach="code">`) {
		t.Fatalf("%s has no timeline of the code under test", test.HTML)
	}
}

// The same counter with the lease's fencing token keeps every increment,
// under the faults that stop a worker, cut it off, kill it and lose its
// answers (stall and delay: TestRandomReplaysItsSchedule's schedule).
func TestFencedLockKeepsIncrements(t *testing.T) {
	t.Parallel()
	for _, f := range []lockfreetest.Fault{lockfreetest.Pause, lockfreetest.Isolate, lockfreetest.Crash, lockfreetest.LostReply} {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			rep := lockfreetest.Run(t, short(true, f))
			if rep.Faults[f] == 0 || len(rep.Violations) > 0 || !rep.Checked {
				t.Fatalf("fenced lock under %s: %s %q", f, rep.Summary(), rep.Violations)
			}
		})
	}
}

// counterModel is the counter's sequential specification: an increment
// answers the value it made; one whose answer was lost may or may not
// have applied.
var counterModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{int64(0)} },
	Step: func(state, _, output any) []any {
		n, out := state.(int64), output.(lockfreetest.Result[int64])
		switch {
		case out.Unknown:
			return []any{n, n + 1}
		case out.Value == n+1:
			return []any{n + 1}
		}
		return nil
	},
}).ToModel()

// A Model instead of a Check: the naive lock's history is not
// linearizable, the fenced lock's is.
func TestModelChecksEachKey(t *testing.T) {
	t.Parallel()
	for _, fenced := range []bool{false, true} {
		t.Run(fmt.Sprintf("fenced=%v", fenced), func(t *testing.T) {
			t.Parallel()
			test := short(fenced, lockfreetest.Pause)
			test.Check, test.Model, test.Keys = nil, &counterModel, 2
			rep := lockfreetest.Run(t, test)
			switch {
			case !rep.Checked:
				t.Fatalf("not checked: %s", rep.Summary())
			case fenced && len(rep.Violations) > 0:
				t.Fatalf("fenced: %q", rep.Violations)
			case !fenced && !slices.ContainsFunc(rep.Violations, func(v string) bool { return strings.Contains(v, "no order") }):
				t.Fatalf("naive: %q, want a key whose operations no order fits", rep.Violations)
			}
		})
	}
}

// replayEnv marks the process TestRandomReplaysItsSchedule starts to run
// itself again.
const replayEnv = "LOCKFREETEST_REPLAY"

// The same test with the same seed draws the same schedule, in a process of
// its own; the fenced counter survives it.
func TestRandomReplaysItsSchedule(t *testing.T) {
	t.Parallel()
	test := short(true, lockfreetest.Random)
	test.Seed = 7
	rep := lockfreetest.Run(t, test)
	var drawn []string
	for _, in := range rep.Schedule {
		drawn = append(drawn, in.String())
	}
	t.Logf("schedule: %s", strings.Join(drawn, ", "))
	if len(rep.Violations) > 0 || len(rep.Schedule) == 0 || rep.Seed != 7 {
		t.Fatalf("%s: %q", rep.Summary(), rep.Violations)
	}
	if os.Getenv(replayEnv) != "" {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), replayEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the replay failed: %v\n%s", err, out)
	}
	want := "schedule: " + strings.Join(drawn, ", ") + "\n"
	if !strings.Contains(string(out), want) {
		t.Fatalf("the replay of seed 7 did not draw %q:\n%s", want, out)
	}
}

// fatal records what a Run reports as fatal, in place of a test.
type fatal struct {
	testing.TB
	msg string
}

func (f *fatal) Helper()                      {}
func (f *fatal) Fatal(args ...any)            { f.msg = fmt.Sprint(args...); runtime.Goexit() }
func (f *fatal) Fatalf(s string, args ...any) { f.msg = fmt.Sprintf(s, args...); runtime.Goexit() }

// A Test that cannot run is refused with ErrInvalid before anything runs.
func TestRunRefusesBadTests(t *testing.T) {
	valid := short(true)
	cases := map[string]func(*lockfreetest.Test[struct{}, int64]){
		"no op":          func(c *lockfreetest.Test[struct{}, int64]) { c.Op = nil },
		"no check":       func(c *lockfreetest.Test[struct{}, int64]) { c.Check = nil },
		"negative lease": func(c *lockfreetest.Test[struct{}, int64]) { c.Lease = -time.Second },
		"one worker":     func(c *lockfreetest.Test[struct{}, int64]) { c.Workers = 1 },
		"unknown fault":  func(c *lockfreetest.Test[struct{}, int64]) { c.Faults = []lockfreetest.Fault{"failover"} },
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			test := valid
			spoil(&test)
			f := &fatal{TB: t}
			done := make(chan struct{})
			go func() { defer close(done); lockfreetest.Run(f, test) }()
			<-done
			if !strings.Contains(f.msg, lockfreetest.ErrInvalid.Error()) {
				t.Fatalf("Run said %q, want %v", f.msg, lockfreetest.ErrInvalid)
			}
		})
	}
}
