package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/testproc"
)

// Concurrent clients on one recorder: every operation comes back once,
// with its outcome, its answer, and Return Inf when uncertain or never
// completed.
func TestRecordRead(t *testing.T) {
	var buf syncBuffer
	r := NewRecorder(&buf)
	const clients, each = 8, 50
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				call, err := r.Invoke(c, "sku-"+strconv.Itoa(i%3), KindSell, map[string]int{"n": i})
				if err != nil {
					t.Error(err)
					return
				}
				switch i % 4 {
				case 0:
					err = call.Ok(map[string]int64{"stock": int64(i)})
				case 1:
					err = call.Fail(errors.New("refused"))
				case 2:
					err = call.Unknown(errors.New("reset"))
				} // 3: never completed, like a killed worker
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	ops, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != clients*each {
		t.Fatalf("read %d operations, want %d", len(ops), clients*each)
	}
	seen := map[string]bool{}
	for j, op := range ops {
		if seen[op.ID()] {
			t.Fatalf("operation %s twice", op.ID())
		}
		seen[op.ID()] = true
		if j > 0 && op.Call < ops[j-1].Call {
			t.Fatalf("operations not sorted by Call at %d", j)
		}
		var in struct{ N int }
		if err := json.Unmarshal(op.Input, &in); err != nil {
			t.Fatal(err)
		}
		want := [...]Outcome{OK, Fail, Unknown, Unknown}[in.N%4]
		switch {
		case op.Outcome != want:
			t.Errorf("operation %s (n=%d): %s, want %s", op.ID(), in.N, op.Outcome, want)
		case op.Outcome == Unknown && op.Return != Inf:
			t.Errorf("uncertain operation %s returns at %d, want Inf", op.ID(), op.Return)
		case op.Outcome != Unknown && op.Return < op.Call:
			t.Errorf("operation %s returns before its call", op.ID())
		case op.Outcome == OK && string(op.Output) != fmt.Sprintf(`{"stock":%d}`, in.N):
			t.Errorf("operation %s output %s", op.ID(), op.Output)
		case op.Outcome == Fail && op.Meta["error"] != "refused":
			t.Errorf("operation %s meta %v, want the error", op.ID(), op.Meta)
		}
	}
}

// worker is a child process that records operations to the file named by
// WORKER_FILE as client WORKER_CLIENT, on command: "op" records an operation
// and completes it, "hang" invokes one and never completes it.
func worker(in *bufio.Scanner, out io.Writer) error {
	f, err := os.OpenFile(os.Getenv("WORKER_FILE"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	client, err := strconv.Atoi(os.Getenv("WORKER_CLIENT"))
	if err != nil {
		return err
	}
	r := NewRecorder(f)
	for in.Scan() {
		call, err := r.Invoke(client, "doc", KindEdit, DocInput{Edit: in.Text() + strconv.Itoa(client)})
		if err != nil {
			return err
		}
		if in.Text() == "hang" {
			fmt.Fprintln(out, "invoked")
			select {} // until killed
		}
		if err := call.Ok(DocState{}); err != nil {
			return err
		}
		fmt.Fprintln(out, "done")
	}
	return in.Err()
}

// Two worker processes record into their own files: the merged history
// orders an operation that began after another process's returned after
// it (one clock for the machine), and a worker killed mid-operation leaves
// that operation uncertain.
func TestReadMergesWorkers(t *testing.T) {
	dir := t.TempDir()
	files := []string{filepath.Join(dir, "w1.jsonl"), filepath.Join(dir, "w2.jsonl")}
	w1 := testproc.Start(t, "worker", "WORKER_FILE="+files[0], "WORKER_CLIENT=1")
	w2 := testproc.Start(t, "worker", "WORKER_FILE="+files[1], "WORKER_CLIENT=2")
	const patience = time.Minute
	w1.Send("op")
	w1.Expect("done", patience)
	w2.Send("op") // starts after w1's operation returned
	w2.Expect("done", patience)
	w1.Send("hang")
	w1.Expect("invoked", patience)
	w1.Kill()

	ops, err := ReadFiles(files...)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 3 {
		t.Fatalf("%d operations, want 3: %+v", len(ops), ops)
	}
	first, second, hung := ops[0], ops[1], ops[2]
	if first.Client != 1 || second.Client != 2 || hung.Client != 1 {
		t.Fatalf("order %s, %s, %s; want 1/1, 2/1, 1/2", first.ID(), second.ID(), hung.ID())
	}
	if second.Call <= first.Return {
		t.Errorf("worker 2's call at %d is not after worker 1's return at %d", second.Call, first.Return)
	}
	if hung.Outcome != Unknown || hung.Return != Inf {
		t.Errorf("the killed worker's operation: %s, return %d; want unknown, Inf", hung.Outcome, hung.Return)
	}
}

// A stream cut mid-line by a dying worker: the torn line is ignored, so a
// torn invoke was never sent and a torn completion leaves its operation
// uncertain.
func TestReadTornLine(t *testing.T) {
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	a, _ := r.Invoke(1, "k", KindRead, nil)
	b, _ := r.Invoke(1, "k", KindRead, nil)
	_ = a.Ok(at(1, "a"))
	n := buf.Len()
	_ = b.Ok(at(2, "b"))
	torn := buf.Bytes()[:n+10] // b's completion, cut
	ops, err := Read(bytes.NewReader(torn))
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 2 || ops[0].Outcome != OK || ops[1].Outcome != Unknown {
		t.Fatalf("got %+v; want a ok, b unknown", ops)
	}

	var c bytes.Buffer
	_, _ = NewRecorder(&c).Invoke(1, "k", KindRead, nil)
	ops, err = Read(bytes.NewReader(c.Bytes()[:c.Len()-5]))
	if err != nil || len(ops) != 0 {
		t.Fatalf("a torn invoke: %+v, %v; want nothing", ops, err)
	}
}

func TestReadRejects(t *testing.T) {
	inv := `{"ev":"invoke","client":1,"seq":1,"key":"k","kind":"read","t":10}`
	for name, tc := range map[string]struct {
		streams []string
		line    int
	}{
		"not JSON":             {[]string{inv + "\n{\n"}, 2},
		"bad event":            {[]string{`{"ev":"begin","client":1,"seq":1,"t":1}` + "\n"}, 1},
		"no key":               {[]string{`{"ev":"invoke","client":1,"seq":1,"kind":"read","t":1}` + "\n"}, 1},
		"seq 0":                {[]string{`{"ev":"invoke","client":1,"seq":0,"key":"k","kind":"read","t":1}` + "\n"}, 1},
		"invoked twice":        {[]string{inv + "\n", inv + "\n"}, 1},
		"completed twice":      {[]string{inv + "\n" + `{"ev":"ok","client":1,"seq":1,"t":11}` + "\n" + `{"ev":"fail","client":1,"seq":1,"t":12}` + "\n"}, 3},
		"never invoked":        {[]string{`{"ev":"ok","client":1,"seq":1,"t":11}` + "\n"}, 1},
		"returns before calls": {[]string{inv + "\n" + `{"ev":"ok","client":1,"seq":1,"t":9}` + "\n"}, 2},
		"line too long":        {[]string{strings.Repeat(" ", MaxLine+1) + "\n"}, 1},
	} {
		t.Run(name, func(t *testing.T) {
			var rs []io.Reader
			for _, s := range tc.streams {
				rs = append(rs, strings.NewReader(s))
			}
			ops, err := Read(rs...)
			var re *RecordError
			if !errors.As(err, &re) || !errors.Is(err, ErrInvalid) || ops != nil {
				t.Fatalf("Read = %v, %v; want a *RecordError matching ErrInvalid", ops, err)
			}
			if re.Line != tc.line {
				t.Errorf("line %d, want %d (%v)", re.Line, tc.line, err)
			}
		})
	}
}

func TestRecorderRejects(t *testing.T) {
	r := NewRecorder(io.Discard)
	for name, f := range map[string]func() error{
		"negative client": func() error { _, err := r.Invoke(-1, "k", "read", nil); return err },
		"no key":          func() error { _, err := r.Invoke(1, "", "read", nil); return err },
		"no kind":         func() error { _, err := r.Invoke(1, "k", "", nil); return err },
		"input not JSON":  func() error { _, err := r.Invoke(1, "k", "read", make(chan int)); return err },
		"completed twice": func() error {
			c, _ := r.Invoke(1, "k", "read", nil)
			_ = c.Ok(nil)
			return c.Fail(nil)
		},
		"output not JSON": func() error {
			c, _ := r.Invoke(1, "k", "read", nil)
			return c.Ok(func() {})
		},
	} {
		if err := f(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}

	broken := NewRecorder(failingWriter{})
	if _, err := broken.Invoke(1, "k", "read", nil); err == nil || broken.Err() == nil {
		t.Fatalf("a failed write: Invoke %v, Err %v; want both", err, broken.Err())
	}
	if _, err := broken.Invoke(1, "k", "read", nil); !errors.Is(err, errDisk) {
		t.Fatalf("after a failed write: %v, want the first error", err)
	}
}

var errDisk = errors.New("disk full")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errDisk }

// syncBuffer is a bytes.Buffer safe for concurrent writes, as a file is.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Read(p)
}
