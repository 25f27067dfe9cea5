package history

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/lockfree-go/lockfree/internal/short"
)

// event is one line of a recorder's stream: an invoke, or the completion of
// the invoke with the same client and seq.
type event struct {
	// Ev is "invoke", or the outcome of a completion: "ok", "fail",
	// "unknown".
	Ev     string            `json:"ev"`
	Client int               `json:"client"`
	Seq    int64             `json:"seq"`
	Key    string            `json:"key,omitempty"`
	Kind   string            `json:"kind,omitempty"`
	Input  json.RawMessage   `json:"input,omitempty"`
	Output json.RawMessage   `json:"output,omitempty"`
	T      Time              `json:"t"`
	Meta   map[string]string `json:"meta,omitempty"`
}

const evInvoke = "invoke"

// Recorder writes the events of one process's operations to a stream, one
// JSON line per invoke and one per completion, each with a single Write so
// that a process killed at any point leaves whole lines behind (give it an
// *os.File or a pipe, not a buffered writer). Read merges the streams of
// many recorders into one history.
//
// Create a Recorder with NewRecorder; it is safe for concurrent use. Each
// Call it returns belongs to the goroutine that runs the operation. A client
// number belongs to one recorder, which numbers its operations from 1: give
// a restarted worker a new client number (Read refuses an operation ID
// seen twice).
type Recorder struct {
	mu  sync.Mutex
	w   io.Writer
	seq int64
	err error // the first write error: every later record fails with it
}

// NewRecorder returns a recorder that writes to w.
func NewRecorder(w io.Writer) *Recorder { return &Recorder{w: w} }

// Call is an operation that has been invoked and not yet completed. Complete
// it exactly once, with Ok, Fail, Unknown or Finish; an operation never
// completed is read as Unknown. A Call is not safe for concurrent use.
type Call struct {
	r      *Recorder
	client int
	seq    int64
	meta   map[string]string
	done   bool
}

// Invoke records that client is about to send an operation of kind on key
// with input (any value encoding/json accepts; nil for none) and returns its
// Call. Invoke before the request leaves the process: a worker killed after
// Invoke leaves an operation of unknown outcome, one killed before has sent
// nothing. If Invoke fails, do not send the operation: the history would
// miss it.
func (r *Recorder) Invoke(client int, key, kind string, input any) (*Call, error) {
	if client < 0 {
		return nil, fmt.Errorf("%w: client %d is negative", ErrInvalid, client)
	}
	if key == "" || kind == "" {
		return nil, fmt.Errorf("%w: an operation needs a key and a kind (got key %s, kind %s)",
			ErrInvalid, short.Quote(key), short.Quote(kind))
	}
	in, err := marshal(input)
	if err != nil {
		return nil, fmt.Errorf("%w: input of %s on key %s: %w", ErrInvalid, short.Quote(kind), short.Quote(key), err)
	}
	t := Now() // before the request leaves: a wider interval is safe, a narrower one is not
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	ev := event{Ev: evInvoke, Client: client, Seq: r.seq, Key: key, Kind: kind, Input: in, T: t}
	if err := r.writeLocked(&ev); err != nil {
		return nil, err
	}
	return &Call{r: r, client: client, seq: r.seq}, nil
}

// Err returns the first error the recorder met writing, if any.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *Recorder) writeLocked(ev *event) error {
	if r.err != nil {
		return r.err
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := r.w.Write(append(b, '\n')); err != nil {
		r.err = fmt.Errorf("history: recording: %w", err)
		return r.err
	}
	return nil
}

// ID names the operation as Op.ID will: store it beside the effects the
// operation makes, so that a checker can tell which operation made them.
func (c *Call) ID() string { return opID(c.client, c.seq) }

// Set attaches a note to the operation, written with its completion (the
// attempt count, the server that answered). "error" is set by Fail, Unknown
// and Finish.
func (c *Call) Set(key, value string) {
	if c.meta == nil {
		c.meta = map[string]string{}
	}
	c.meta[key] = value
}

// Ok records that the operation completed with output (nil for none).
func (c *Call) Ok(output any) error {
	out, err := marshal(output)
	if err != nil {
		return fmt.Errorf("%w: output of operation %s: %w", ErrInvalid, c.ID(), err)
	}
	return c.complete(OK, out, nil)
}

// Fail records that the operation certainly had no effect; cause, if not
// nil, is kept as the note "error".
func (c *Call) Fail(cause error) error { return c.complete(Fail, nil, cause) }

// Unknown records that the operation may or may not have taken effect;
// cause, if not nil, is kept as the note "error".
func (c *Call) Unknown(cause error) error { return c.complete(Unknown, nil, cause) }

// Finish completes the operation from its result: Ok(output) when err is
// nil, otherwise Fail or Unknown as Classify(err, refusals...) decides.
func (c *Call) Finish(output any, err error, refusals ...error) error {
	if err == nil {
		return c.Ok(output)
	}
	return c.complete(Classify(err, refusals...), nil, err)
}

func (c *Call) complete(o Outcome, out json.RawMessage, cause error) error {
	if c.done {
		return fmt.Errorf("%w: operation %s completed twice", ErrInvalid, c.ID())
	}
	c.done = true
	if cause != nil {
		c.Set("error", cause.Error())
	}
	t := Now()
	ev := event{Ev: o.String(), Client: c.client, Seq: c.seq, Output: out, T: t, Meta: c.meta}
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	return c.r.writeLocked(&ev)
}

func marshal(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	return json.Marshal(v)
}
