package history

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// FuzzReadCheck reads arbitrary bytes as a recorded stream and checks what
// it yields with every checker: no input may panic, and any refusal is an
// ErrInvalid.
func FuzzReadCheck(f *testing.F) {
	var seed bytes.Buffer
	r := NewRecorder(&seed)
	c, _ := r.Invoke(1, "doc", KindEdit, DocInput{Edit: "a"})
	_ = c.Ok(DocState{})
	c, _ = r.Invoke(2, "doc", KindRead, nil)
	_ = c.Ok(DocState{Version: 1, Head: "a", Edits: []string{"a"}})
	_, _ = r.Invoke(3, "doc", KindEdit, DocInput{Edit: "b"})
	f.Add(seed.Bytes())
	f.Add([]byte(`{"ev":"invoke","client":1,"seq":1,"key":"e","kind":"produce","input":{"seqs":[1,2]},"t":1}` + "\n" +
		`{"ev":"ok","client":1,"seq":1,"t":2}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ops, err := Read(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Read: %v is not an ErrInvalid", err)
			}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := Check(ctx, Document{}, ops, Config{Window: 3, Timeout: time.Second}); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("Check: %v is not an ErrInvalid", err)
		}
		effects := []Effect{{Key: "doc", Seq: 1, By: "1/1"}, {Key: "sku", Seq: 2, By: "9/9"}}
		for name, check := range map[string]func([]Op, []Effect) (*Findings, error){
			"delivery": Delivery, "invariant": func(ops []Op, effects []Effect) (*Findings, error) {
				inv, err := NewInvariant("invariant", ops, effects, "charge")
				if err != nil {
					return nil, err
				}
				return inv.Findings(), nil
			},
		} {
			if _, err := check(ops, effects); err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("%s: %v is not an ErrInvalid", name, err)
			}
		}
	})
}

// FuzzCheckRandom checks random histories — mostly not linearizable — of
// documents: no history may panic a check, and a report's figure agrees
// with its keys.
func FuzzCheckRandom(f *testing.F) {
	f.Add(uint64(1), uint8(30), uint8(4))
	f.Add(uint64(7), uint8(200), uint8(2))
	f.Fuzz(func(t *testing.T, seed uint64, n, window uint8) {
		rnd := rand.New(rand.NewPCG(seed, 3))
		b := newBuilder()
		heads := []string{"", "a", "b", "c"}
		for i := range int(n) {
			call := rnd.Int64N(100)
			ret := call + rnd.Int64N(20)
			o := [...]Outcome{OK, OK, OK, Fail, Unknown}[rnd.IntN(5)]
			if o == Unknown {
				ret = -1
			}
			c := rnd.IntN(6)
			key := "k" + strconv.Itoa(rnd.IntN(2))
			if rnd.IntN(2) == 0 {
				b.add(c, key, KindEdit, call, ret, o, edit(strconv.Itoa(i)), at(rnd.Int64N(5), heads[rnd.IntN(4)]))
			} else {
				b.add(c, key, KindRead, call, ret, o, nil, at(rnd.Int64N(5), strconv.Itoa(rnd.IntN(int(n)+1))))
			}
		}
		cfg := Config{Window: 2 + int(window)%20, Timeout: time.Second}
		rep, err := Check(context.Background(), Document{}, b.ops, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Checked() && rep.Figure() != strconv.Itoa(rep.Violations()) {
			t.Fatalf("figure %s with %d violations", rep.Figure(), rep.Violations())
		}
		for _, k := range rep.Keys {
			if (k.Status == Violated) != (len(k.Violations) > 0) {
				t.Fatalf("key %s %s with %d violations", k.Key, k.Status, len(k.Violations))
			}
			var page bytes.Buffer
			if err := rep.Visualize(&page, k.Key); err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("Visualize: %v", err)
			}
		}
	})
}
