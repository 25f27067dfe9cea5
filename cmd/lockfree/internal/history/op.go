package history

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// ErrInvalid is returned, wrapped, for a history or an argument the package
// cannot use: a malformed record, an operation of a kind the model does not
// know, an output it cannot decode. It is detected before anything is
// checked, so no partial verdict is returned with it.
var ErrInvalid = errors.New("history: invalid argument")

// Time is a point on the history clock, in nanoseconds. Times from Now are
// comparable across the processes of one machine.
type Time int64

// Inf is the Return of an operation whose outcome is unknown: it may take
// effect at any time after its Call, or never.
const Inf Time = math.MaxInt64

// Outcome is what became of an operation.
type Outcome uint8

const (
	// OK: the operation completed and its Output is the system's answer,
	// including an answer that refuses the operation but tells something
	// about the state (insufficient stock).
	OK Outcome = iota + 1
	// Fail: the operation certainly had no effect, and its answer tells
	// nothing about the state: the request never left the process, or the
	// server refused it (a conflict, a fenced write, an aborted
	// transaction).
	Fail
	// Unknown: the operation may or may not have taken effect, at any time
	// after its Call: a timeout or a reset after the request was sent, or a
	// worker that died before recording the completion.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Fail:
		return "fail"
	case Unknown:
		return "unknown"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// MarshalText encodes an outcome as "ok", "fail" or "unknown".
func (o Outcome) MarshalText() ([]byte, error) {
	switch o {
	case OK, Fail, Unknown:
		return []byte(o.String()), nil
	}
	return nil, fmt.Errorf("%w: outcome %d", ErrInvalid, o)
}

// UnmarshalText decodes "ok", "fail" or "unknown".
func (o *Outcome) UnmarshalText(b []byte) error {
	switch string(b) {
	case "ok":
		*o = OK
	case "fail":
		*o = Fail
	case "unknown":
		*o = Unknown
	default:
		return fmt.Errorf("%w: outcome %q is not ok, fail or unknown", ErrInvalid, b)
	}
	return nil
}

// Op is one operation of a history: what a client asked of one key, when,
// and what became of it. Client and Seq identify it. Input and Output are
// JSON values in the vocabulary of the checker that checks the key (see
// Document and Store); an Output is only meaningful when Outcome is OK.
// An operation whose Outcome is Unknown has Return Inf.
type Op struct {
	Client  int               `json:"client"`
	Seq     int64             `json:"seq"`
	Key     string            `json:"key"`
	Kind    string            `json:"kind"`
	Input   json.RawMessage   `json:"input,omitempty"`
	Output  json.RawMessage   `json:"output,omitempty"`
	Call    Time              `json:"call"`
	Return  Time              `json:"return"`
	Outcome Outcome           `json:"outcome"`
	Meta    map[string]string `json:"meta,omitempty"`
}

// ID names the operation as "client/seq", the form to store beside an
// effect (a charge, a log row) so that a checker can tell which operation
// made it.
func (o *Op) ID() string { return opID(o.Client, o.Seq) }

func opID(client int, seq int64) string {
	return strconv.Itoa(client) + "/" + strconv.FormatInt(seq, 10)
}

// validate checks what every checker relies on: known outcomes, a client
// number, an ID used once, a key and a kind, and no return before the call.
func validate(checker string, ops []Op) error {
	seen := make(map[[2]int64]bool, len(ops))
	for i := range ops {
		op := &ops[i]
		bad := func(why string) error {
			return fmt.Errorf("%w: %s: operation %s on key %s: %s", ErrInvalid, checker, op.ID(), quote(op.Key), why)
		}
		id := [2]int64{int64(op.Client), op.Seq}
		switch {
		case op.Outcome != OK && op.Outcome != Fail && op.Outcome != Unknown:
			return bad(fmt.Sprintf("outcome %d is not ok, fail or unknown", op.Outcome))
		case op.Client < 0:
			return bad("negative client")
		case op.Key == "" || op.Kind == "":
			return bad("no key or no kind")
		case seen[id]:
			return bad("the ID is used twice")
		case op.Outcome != Unknown && op.Return < op.Call:
			return bad("it returns before its call")
		}
		seen[id] = true
	}
	return nil
}

// Operation kinds that more than one checker knows.
const (
	// KindSell takes one unit of stock (Store's rows) if there is one.
	KindSell = "sell"
	// KindRead reads a key's state (a Document; a row, in Store's final
	// reads).
	KindRead = "read"
)
