package outbox_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/outbox"
	"github.com/lockfree-go/lockfree/partition"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// backend makes a store of the given partition count.
type backend struct {
	name string
	new  func(t *testing.T, partitions int) outbox.Store
}

var backends = []backend{
	{"memory", func(t *testing.T, partitions int) outbox.Store {
		m, err := outbox.NewMemory(&outbox.MemoryConfig{Partitions: partitions, MaxEventBytes: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}},
	{"postgres", func(t *testing.T, partitions int) outbox.Store {
		db := testdb.New(t, outbox.Migrations()...)
		p, err := outbox.NewPostgres(db.Pool, &outbox.PostgresConfig{Partitions: partitions, MaxEventBytes: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}},
}

// The behaviour every store shares.
func TestStore(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for name, test := range map[string]func(*testing.T, outbox.Store){
				"write":   testWrite,
				"invalid": testInvalid,
				"pending": testPending,
				"published": func(t *testing.T, s outbox.Store) {
					if err := checkPublishedFenced(t, s); err != nil {
						t.Fatal(err)
					}
				},
			} {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					test(t, b.new(t, 4))
				})
			}
		})
	}
}

func testWrite(t *testing.T, s outbox.Store) {
	ring, err := partition.NewRing(nil, &partition.RingConfig{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	var last = map[string]int64{}
	for i := range 6 {
		key := []string{"a", "b"}[i%2]
		ev := outbox.Event{Key: key, ID: fmt.Sprintf("%s-%d", key, i), Payload: []byte{byte(i)},
			Headers: []kafka.Header{{Key: "type", Value: []byte("paid")}, {Key: "empty"}}}
		r, err := s.Write(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		if r.Seq <= last[key] {
			t.Errorf("%s: sequence %d after %d", r.ID, r.Seq, last[key])
		}
		last[key] = r.Seq
		if r.Partition != ring.Partition(key) || r.Key != key || r.ID != ev.ID || !bytes.Equal(r.Payload, ev.Payload) ||
			len(r.Headers) != 2 || r.Created.IsZero() {
			t.Errorf("Write(%+v) = %+v", ev, r)
		}
	}
	r, err := s.Write(ctx, outbox.Event{Key: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := uuid.Parse(r.ID); err != nil || id.Version() != 7 {
		t.Errorf("default ID %q is not a UUIDv7", r.ID)
	}
	recs, err := outbox.Pending(ctx, s, r.Partition, 10)
	if err != nil || len(recs) == 0 {
		t.Fatalf("pending: %v, %v", recs, err)
	}
	if got := recs[len(recs)-1]; got.Payload != nil || got.ID != r.ID || got.Seq != r.Seq {
		t.Errorf("a nil payload read back as %+v", got)
	}
}

func testInvalid(t *testing.T, s outbox.Store) {
	cases := map[string]outbox.Event{
		"empty key":         {},
		"key too long":      {Key: strings.Repeat("k", 256)},
		"key not UTF-8":     {Key: "\xff"},
		"key with NUL":      {Key: "a\x00b"},
		"ID too long":       {Key: "k", ID: strings.Repeat("i", 256)},
		"ID with NUL":       {Key: "k", ID: "\x00"},
		"empty header key":  {Key: "k", Headers: []kafka.Header{{Key: ""}}},
		"event ID header":   {Key: "k", Headers: []kafka.Header{{Key: kafkawriter.HeaderEventID, Value: []byte("x")}}},
		"event seq header":  {Key: "k", Headers: []kafka.Header{{Key: kafkawriter.HeaderEventSeq, Value: []byte("1")}}},
		"too large payload": {Key: "k", Payload: make([]byte, 1000)},
		"too large headers": {Key: "k", Headers: []kafka.Header{{Key: "h", Value: make([]byte, 999)}}},
		// 100 bytes of header keys, but 100 records' worth of lengths.
		"too many headers": {Key: "k", Headers: slices.Repeat([]kafka.Header{{Key: "h"}}, 100)},
	}
	for name, ev := range cases {
		if _, err := s.Write(ctx, ev); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	for p := range s.Partitions() {
		if recs, _ := outbox.Pending(ctx, s, p, 10); len(recs) != 0 {
			t.Errorf("partition %d holds %d events after refused writes", p, len(recs))
		}
	}
}

// Pending returns a partition's events oldest first, up to the limit.
func testPending(t *testing.T, s outbox.Store) {
	var want []string
	var p int
	for i := range 5 {
		r, err := s.Write(ctx, outbox.Event{Key: "k", ID: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		want, p = append(want, r.ID), r.Partition
	}
	recs, err := outbox.Pending(ctx, s, p, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(want[:3]) {
		t.Errorf("pending = %v, want %v", got, want[:3])
	}
}

// checkPublishedFenced guards the delete's epoch condition: a relay whose
// partition a newer relay claimed deletes nothing, and learns it
// (ErrStaleEpoch); the current owner deletes.
func checkPublishedFenced(t *testing.T, s outbox.Store) error {
	t.Helper()
	var p int
	for i := range 3 {
		r, err := s.Write(ctx, outbox.Event{Key: "k", ID: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		p = r.Partition
	}
	m := outbox.Membership(s)
	claim := func(name string) partition.Epoch {
		info, err := m.Join(ctx, partition.MemberInfo{Name: name}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		es, err := m.Claim(ctx, name, info.Incarnation, []int{p})
		if err != nil || len(es) != 1 {
			t.Fatalf("claim by %s: %v, %v", name, es, err)
		}
		return es[0]
	}
	a := claim("a")
	recs, err := outbox.Pending(ctx, s, p, 10)
	if err != nil || len(recs) != 3 {
		t.Fatalf("pending: %d, %v", len(recs), err)
	}
	if err := m.Release(ctx, []partition.Epoch{a}); err != nil {
		t.Fatal(err)
	}
	b := claim("b")
	err = outbox.Published(ctx, s, a, recs)
	left, _ := outbox.Pending(ctx, s, p, 10)
	switch {
	case len(left) != 3:
		return fmt.Errorf("a relay superseded by a newer one deleted %d events it read", 3-len(left))
	case !errors.Is(err, outbox.ErrStaleEpoch):
		return fmt.Errorf("a superseded relay's delete returned %v, want ErrStaleEpoch", err)
	}
	if err := outbox.Published(ctx, s, b, recs); err != nil {
		t.Fatal(err)
	}
	if left, _ := outbox.Pending(ctx, s, p, 10); len(left) != 0 {
		t.Fatalf("the owner's delete left %d events", len(left))
	}
	return nil
}

func TestStoreConfigValidation(t *testing.T) {
	t.Parallel()
	for name, err := range map[string]error{
		"memory partitions -1":  second(outbox.NewMemory(&outbox.MemoryConfig{Partitions: -1})),
		"memory partitions max": second(outbox.NewMemory(&outbox.MemoryConfig{Partitions: outbox.MaxPartitions + 1})),
		"memory event bytes":    second(outbox.NewMemory(&outbox.MemoryConfig{MaxEventBytes: -1})),
		"postgres nil DB":       second(outbox.NewPostgres(nil, nil)),
	} {
		if !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }
