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
	c, _ = r.Invoke(3, "sku", KindSell, nil)
	_ = c.Ok(Stock(4))
	_, _ = r.Invoke(4, "sku", KindSell, nil)
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
		for _, m := range []Model{Counter{Initial: 5}, Document{}} {
			if _, err := Check(ctx, m, ops, Config{Window: 3, Timeout: time.Second}); err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("Check %s: %v is not an ErrInvalid", m.name(), err)
			}
		}
		effects := []Effect{{Key: "doc", Seq: 1, By: "1/1"}, {Key: "sku", Seq: 2, By: "9/9"}}
		for name, check := range map[string]func([]Op, []Effect) (*Report, error){
			"delivery": Delivery, "invariant": func(ops []Op, effects []Effect) (*Report, error) {
				inv, err := NewInvariant("invariant", ops, effects, "charge")
				if err != nil {
					return nil, err
				}
				return inv.Report(), nil
			},
		} {
			if _, err := check(ops, effects); err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("%s: %v is not an ErrInvalid", name, err)
			}
		}
	})
}

// FuzzCheckRandom checks random histories — mostly not linearizable — of
// both models: no history may panic a check, and a report's figure agrees
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
			switch rnd.IntN(4) {
			case 0:
				b.add(c, key, KindSell, call, ret, o, nil, Stock(rnd.Int64N(8)-1))
			case 1:
				b.add(c, key, KindRead, call, ret, o, nil, Stock(rnd.Int64N(8)))
			case 2:
				b.add(c, "d"+key, KindEdit, call, ret, o, edit(strconv.Itoa(i)), at(rnd.Int64N(5), heads[rnd.IntN(4)]))
			default:
				b.add(c, "d"+key, KindRead, call, ret, o, nil, at(rnd.Int64N(5), strconv.Itoa(rnd.IntN(int(n)+1))))
			}
		}
		var sales, docs []Op
		for _, op := range b.ops {
			if op.Key[0] == 'd' {
				docs = append(docs, op)
			} else {
				sales = append(sales, op)
			}
		}
		cfg := Config{Window: 2 + int(window)%20, Timeout: time.Second}
		for _, c := range []struct {
			m   Model
			ops []Op
		}{{Counter{Initial: 5}, sales}, {Document{}, docs}} {
			m, ops := c.m, c.ops
			rep, err := Check(context.Background(), m, ops, cfg)
			if err != nil {
				t.Fatalf("%s: %v", m.name(), err)
			}
			if rep.Checked() && rep.Figure() != strconv.Itoa(rep.Violations()) {
				t.Fatalf("%s: figure %s with %d violations", m.name(), rep.Figure(), rep.Violations())
			}
			for _, k := range rep.Keys {
				if (k.Status == Violated) != (len(k.Violations) > 0) {
					t.Fatalf("%s: key %s %s with %d violations", m.name(), k.Key, k.Status, len(k.Violations))
				}
				var page bytes.Buffer
				if err := rep.Visualize(&page, k.Key); err != nil && !errors.Is(err, ErrInvalid) {
					t.Fatalf("Visualize: %v", err)
				}
			}
		}
	})
}
