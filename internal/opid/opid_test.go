package opid_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockfree-go/lockfree/internal/opid"
)

// Minted reads the time of a UUIDv7, as uuid.NewV7 and At write it, and
// refuses every other UUID.
func TestMinted(t *testing.T) {
	t.Parallel()
	before := time.Now().Truncate(time.Millisecond)
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	got, err := opid.Minted(id)
	if err != nil || got.Before(before) || got.After(time.Now()) {
		t.Fatalf("Minted(NewV7()) = %v, %v; want a time after %v", got, err, before)
	}
	at := time.Date(2031, 5, 6, 7, 8, 9, 123_000_000, time.UTC)
	id = opid.At(at)
	if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
		t.Fatalf("At made version %d, variant %v", id.Version(), id.Variant())
	}
	if got, err := opid.Minted(id); err != nil || !got.Equal(at) {
		t.Fatalf("Minted(At(%v)) = %v, %v", at, got, err)
	}
	if a, b := opid.At(at), opid.At(at); a == b {
		t.Fatal("At made the same UUID twice")
	}
	for _, bad := range []uuid.UUID{uuid.Nil, uuid.New(), uuid.NewSHA1(uuid.NameSpaceURL, []byte("x")), uuid.Max} {
		if _, err := opid.Minted(bad); err == nil {
			t.Errorf("Minted(%s) accepted a UUID that is not a v7", bad)
		}
	}
	// UUIDs compare bytewise: v7 IDs sort by their time.
	if early, late := opid.At(at), opid.At(at.Add(time.Millisecond)); string(early[:]) >= string(late[:]) {
		t.Fatal("a later UUIDv7 does not sort after an earlier one")
	}
}

func TestAgeOf(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r := time.Hour
	for _, c := range []struct {
		minted time.Time
		want   opid.Age
	}{
		{now, opid.Live},
		{now.Add(-r), opid.Live},
		{now.Add(-r - time.Millisecond), opid.Expired},
		{now.Add(r), opid.Live},
		{now.Add(r + time.Millisecond), opid.Future},
	} {
		if got := opid.AgeOf(c.minted, now, r); got != c.want {
			t.Errorf("AgeOf(%v) = %v, want %v", c.minted.Sub(now), got, c.want)
		}
	}
}

// Fingerprints of different parts differ, even when the parts join alike.
func TestFingerprint(t *testing.T) {
	t.Parallel()
	a, b := opid.Fingerprint("ab", "c"), opid.Fingerprint("a", "bc")
	if string(a) == string(b) || len(a) != 32 {
		t.Fatalf("Fingerprint(ab, c) = %x, Fingerprint(a, bc) = %x", a, b)
	}
	if string(opid.Fingerprint("x")) != string(opid.Fingerprint("x")) {
		t.Fatal("Fingerprint is not deterministic")
	}
}
