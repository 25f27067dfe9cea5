// Package opid is what atomic and occ share about operation IDs: an ID is a
// UUIDv7 that its caller mints once per intent, and its time bounds how long
// it can be used.
//
// An ID is good for a store's Retention after the time it carries, and for
// no longer: an operation or a Resolve with an older ID is refused as
// expired, before anything is written. A store therefore needs to keep an
// ID's record only that long, and a purge by that time never opens a window
// in which a late retry of a purged ID applies again.
package opid

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Retention bounds.
const (
	// DefaultRetention is how long an ID is good by default.
	DefaultRetention = 24 * time.Hour
	// MinRetention is the shortest Retention a store accepts: shorter, a
	// client clock a little ahead of the database's would date fresh IDs in
	// the future.
	MinRetention = time.Second
)

// Minted returns the time id carries: the milliseconds since the Unix epoch
// of a UUIDv7 (RFC 9562). Any other UUID is an error: without that time, a
// store could not tell an ID too old to trust.
func Minted(id uuid.UUID) (time.Time, error) {
	switch {
	case id == uuid.Nil:
		return time.Time{}, errors.New("the nil UUID is not an operation ID")
	case id.Version() != 7 || id.Variant() != uuid.RFC4122:
		return time.Time{}, fmt.Errorf("operation ID %s is not a UUIDv7 (version %d)", id, id.Version())
	}
	ms := int64(binary.BigEndian.Uint64(id[:8]) >> 16)
	return time.UnixMilli(ms).UTC(), nil
}

// At returns a new UUIDv7 carrying t (to the millisecond): what
// uuid.NewV7 makes at t. Tests use it to make IDs that a store's clock
// finds old, or fresh.
func At(t time.Time) uuid.UUID {
	var id uuid.UUID
	if _, err := rand.Read(id[:]); err != nil {
		panic(fmt.Sprintf("opid: %v", err))
	}
	binary.BigEndian.PutUint64(id[:8], uint64(t.UnixMilli())<<16|uint64(binary.BigEndian.Uint16(id[6:8])))
	id[6] = id[6]&0x0f | 0x70 // version 7
	id[8] = id[8]&0x3f | 0x80 // variant RFC 4122
	return id
}

// Age is where an ID's time stands against a store's clock.
type Age int

const (
	// Live: within Retention either side of now.
	Live Age = iota
	// Expired: older than Retention.
	Expired
	// Future: dated more than Retention ahead of now (a broken clock).
	Future
)

// AgeOf says where minted stands at now for retention. The PostgreSQL
// backends decide the same in SQL, on the database's clock.
func AgeOf(minted, now time.Time, retention time.Duration) Age {
	switch {
	case minted.Before(now.Add(-retention)):
		return Expired
	case minted.After(now.Add(retention)):
		return Future
	}
	return Live
}

// Fingerprint identifies an operation and its arguments, so that an ID
// presented again with another operation is refused: a SHA-256 of parts,
// each preceded by its length, so that ("ab", "c") and ("a", "bc") differ.
func Fingerprint(parts ...string) []byte {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return h.Sum(nil)
}
