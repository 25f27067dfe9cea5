package events

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

// findHostile returns the first sequence number of entity from 1 whose
// event is of kind h.
func findHostile(t *testing.T, entity string, h hostility) int64 {
	t.Helper()
	for s := int64(1); s < 1_000_000; s++ {
		if hostileKind(entity, s) == h {
			return s
		}
	}
	t.Fatalf("no event of %s is %s", entity, h)
	return 0
}

// A run's mix is fixed by (entity, seq): about 1 in 40 events hostile, every
// kind among them, never the last event of a produce.
func TestHostileMix(t *testing.T) {
	n, kinds := 0, map[hostility]int{}
	const events = 400_000
	for s := int64(1); s <= events; s++ {
		h := hostileKind("entity-3-0", s)
		if h != wellBehaved {
			n++
			kinds[h]++
			if s%eventsPerOp == 0 {
				t.Fatalf("event %d, the last of its produce, is %s", s, h)
			}
		}
	}
	if share := float64(n) / events; share < 1.0/45 || share > 1.0/35 {
		t.Errorf("%d of %d events hostile (%.4f), want about 1 in %d", n, events, share, hostileEvery)
	}
	for _, h := range []hostility{transient, poison, big, bigPoison, oversized} {
		if kinds[h] == 0 {
			t.Errorf("no %s event in %d", h, events)
		}
	}
}

// produceOp is a produce of seqs of key by client c, its nth, with outcome o.
func produceOp(c int, n int64, key string, o history.Outcome, seqs ...int64) history.Op {
	in, _ := json.Marshal(history.ProduceInput{Seqs: seqs})
	return history.Op{Client: c, Seq: n, Key: key, Kind: history.KindProduce, Input: in,
		Call: history.Time(10 * n), Return: history.Time(10*n + 5), Outcome: o}
}

// The check sees each way the hostile mix can go wrong, and a clean run as
// clean: a duplicate, a loss, a poison event applied, one never
// dead-lettered, a good one dead-lettered, one dead-lettered from two
// records; a copy of one record sent twice is one dead letter.
func TestCheckHostile(t *testing.T) {
	const key = "entity-0-0"
	p := findHostile(t, key, poison)
	first := p - (p-1)%eventsPerOp // the first event of the produce that carries p
	var seqs []int64
	for s := first; s < first+eventsPerOp; s++ {
		seqs = append(seqs, s)
	}
	op := produceOp(0, 1, key, history.OK, seqs...)
	// A clean run: every event but the poison one applied in order, the
	// poison one dead-lettered, its record sent twice.
	var clean []history.Effect
	prev := int64(0)
	for _, s := range seqs {
		if s == p {
			continue
		}
		clean = append(clean, history.Effect{Key: key, Seq: s, Prev: prev, HasPrev: true, By: op.ID()})
		prev = s
	}
	letter := deadLetter{entity: key, seq: p, source: "t/0@7"}
	cases := []struct {
		name    string
		applied []history.Effect
		letters []deadLetter
		want    history.Anomaly // "" for none
	}{
		{"clean", clean, []deadLetter{letter, letter}, ""},
		{"duplicate", append(append([]history.Effect(nil), clean...), clean[len(clean)-1]), []deadLetter{letter}, history.Duplicate},
		{"loss", clean[:len(clean)-1], []deadLetter{letter}, history.Missing},
		{"poison applied", append(append([]history.Effect(nil), clean...), history.Effect{Key: key, Seq: p, Prev: prev, HasPrev: true, By: op.ID()}),
			[]deadLetter{letter}, poisonApplied},
		{"poison lost", clean, nil, poisonLost},
		{"good event dead-lettered", clean, []deadLetter{letter, {entity: key, seq: seqs[len(seqs)-1], source: "t/0@9"}}, deadLetteredWrongly},
		{"dead-lettered from two records", clean, []deadLetter{letter, {entity: key, seq: p, source: "t/0@12"}}, deadLetteredTwice},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := checkHostile([]history.Op{op}, tc.applied, tc.letters)
			if err != nil {
				t.Fatal(err)
			}
			got := map[history.Anomaly]int{}
			var texts []string
			for _, k := range rep.Keys {
				for _, v := range k.Violations {
					got[v.Anomaly]++
					texts = append(texts, v.Text)
				}
			}
			switch {
			case tc.want == "" && rep.Violations() != 0:
				t.Fatalf("%d violations of a clean run: %v", rep.Violations(), texts)
			case tc.want != "" && got[tc.want] == 0:
				t.Fatalf("violations %v (%v), want a %q", got, texts, tc.want)
			}
			t.Log(fmt.Sprint(texts))
		})
	}
	// A poison event of a refused produce is not dead-lettered, and its
	// other events are not applied.
	refused := produceOp(0, 1, key, history.Fail, seqs...)
	if rep, err := checkHostile([]history.Op{refused}, nil, nil); err != nil || rep.Violations() != 0 {
		t.Fatalf("a refused produce: %v, %v; want no violation", rep, err)
	}
	if rep, err := checkHostile([]history.Op{refused}, nil, []deadLetter{letter}); err != nil || rep.Violations() != 1 {
		t.Fatalf("a refused produce's poison event dead-lettered: %v, %v; want 1 violation", rep, err)
	}
}
