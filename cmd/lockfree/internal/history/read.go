package history

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/lockfree-go/lockfree/internal/short"
)

// MaxLine bounds one record of a stream, so that a corrupt stream cannot
// make Read hold gigabytes.
const MaxLine = 1 << 20

// RecordError is a record of a stream that Read cannot use. It matches
// ErrInvalid.
type RecordError struct {
	// Stream is the index of the stream in Read's arguments, Line the
	// 1-based line in it (0 when the problem is a pairing across streams).
	Stream, Line int
	Reason       string
}

func (e *RecordError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("history: stream %d: %s", e.Stream, e.Reason)
	}
	return fmt.Sprintf("history: stream %d line %d: %s", e.Stream, e.Line, e.Reason)
}

// Is makes a RecordError match ErrInvalid.
func (e *RecordError) Is(target error) bool { return target == ErrInvalid }

// Read merges the streams of any number of recorders (one per worker
// process) into one history, sorted by Call, then Client and Seq.
//
// An invoke without a completion — its worker died, or the completion was
// being written when it did — becomes an Unknown operation; every Unknown
// operation gets Return Inf, since it may take effect at any time after its
// Call. A last line without its newline was being written when its worker
// died and is ignored: the recorder writes an invoke before the request
// leaves, so a torn invoke was never sent, and a torn completion leaves its
// operation Unknown. Any other malformed record, an invoke seen twice, a
// completion without its invoke or seen twice, or one that returns before
// its call, is a *RecordError and nothing is returned with it.
func Read(streams ...io.Reader) ([]Op, error) {
	m := merger{byID: map[[2]int64]int{}}
	for i, s := range streams {
		if err := m.stream(i, s); err != nil {
			return nil, err
		}
	}
	return m.finish()
}

// ReadFiles is Read over the named files.
func ReadFiles(paths ...string) ([]Op, error) {
	var rs []io.Reader
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		defer f.Close()
		rs = append(rs, f)
	}
	return Read(rs...)
}

type merger struct {
	ops         []Op
	where       []int            // the stream of each op's invoke
	done        []bool           // whether each op has its completion
	byID        map[[2]int64]int // (client, seq) → index in ops
	completions []pending        // completions seen before their invoke
}

type pending struct {
	ev           event
	stream, line int
}

func (m *merger) stream(i int, r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, complete, err := readLine(br)
		if err != nil {
			return &RecordError{Stream: i, Line: n, Reason: err.Error()}
		}
		if !complete {
			return nil // torn or absent last line
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			return &RecordError{Stream: i, Line: n, Reason: "not a record: " + err.Error()}
		}
		if err := m.add(ev, i, n); err != nil {
			return err
		}
	}
}

// readLine returns the next line without its newline; complete is false at
// the end of the stream, when the line (possibly empty) had no newline.
func readLine(br *bufio.Reader) (line []byte, complete bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case len(line) > MaxLine:
			return nil, false, fmt.Errorf("line longer than %d bytes", MaxLine)
		case err == nil:
			return line[:len(line)-1], true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return line, false, nil
		default:
			return nil, false, err
		}
	}
}

func (m *merger) add(ev event, stream, line int) error {
	bad := func(format string, args ...any) error {
		return &RecordError{Stream: stream, Line: line, Reason: fmt.Sprintf(format, args...)}
	}
	if ev.Client < 0 || ev.Seq < 1 {
		return bad("client %d, seq %d: want client ≥ 0 and seq ≥ 1", ev.Client, ev.Seq)
	}
	id := [2]int64{int64(ev.Client), ev.Seq}
	switch ev.Ev {
	case evInvoke:
		if ev.Key == "" || ev.Kind == "" {
			return bad("invoke %s without a key or a kind", opID(ev.Client, ev.Seq))
		}
		if j, ok := m.byID[id]; ok {
			return bad("operation %s invoked again (first in stream %d)", opID(ev.Client, ev.Seq), m.where[j])
		}
		m.byID[id] = len(m.ops)
		m.ops = append(m.ops, Op{Client: ev.Client, Seq: ev.Seq, Key: ev.Key, Kind: ev.Kind,
			Input: ev.Input, Call: ev.T, Return: Inf, Outcome: Unknown, Meta: ev.Meta})
		m.where = append(m.where, stream)
		m.done = append(m.done, false)
		return nil
	case "ok", "fail", "unknown":
		m.completions = append(m.completions, pending{ev, stream, line})
		return nil
	}
	return bad("event %s is not invoke, ok, fail or unknown", short.Quote(ev.Ev))
}

// finish pairs the completions with their invokes, once every stream is
// read: a completion may come before its invoke when they are in different
// streams.
func (m *merger) finish() ([]Op, error) {
	for _, p := range m.completions {
		ev := p.ev
		bad := func(format string, args ...any) error {
			return &RecordError{Stream: p.stream, Line: p.line, Reason: fmt.Sprintf(format, args...)}
		}
		j, ok := m.byID[[2]int64{int64(ev.Client), ev.Seq}]
		switch {
		case !ok:
			return nil, bad("completion of operation %s, never invoked", opID(ev.Client, ev.Seq))
		case m.done[j]:
			return nil, bad("operation %s completed twice", opID(ev.Client, ev.Seq))
		case ev.T < m.ops[j].Call:
			return nil, bad("operation %s returns at %d, before its call at %d", opID(ev.Client, ev.Seq), ev.T, m.ops[j].Call)
		}
		m.done[j] = true
		op := &m.ops[j]
		var o Outcome
		if err := o.UnmarshalText([]byte(ev.Ev)); err != nil {
			return nil, bad("%v", err)
		}
		op.Outcome, op.Output = o, ev.Output
		if o != Unknown {
			op.Return = ev.T
		}
		for k, v := range ev.Meta {
			if op.Meta == nil {
				op.Meta = map[string]string{}
			}
			op.Meta[k] = v
		}
	}
	slices.SortFunc(m.ops, func(a, b Op) int {
		return cmp.Or(cmp.Compare(a.Call, b.Call), cmp.Compare(a.Client, b.Client), cmp.Compare(a.Seq, b.Seq))
	})
	return m.ops, nil
}
