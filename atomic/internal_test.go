package atomic

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/short"
)

var testTable = Table{Name: "inventory", Key: "sku", Value: "quantity"}

// TestLockNamesAreUnambiguous checks that no key can name the lock of
// another: a long key is hashed, and a key that looks like a hash is hashed
// too rather than colliding with it.
func TestLockNamesAreUnambiguous(t *testing.T) {
	t.Parallel()
	f, err := NewFenced(memoryLocks(nil), &pgxpool.Pool{}, testTable, nil)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", MaxKeyLen)
	keys := []string{long, f.lockName(long), "short", "sha256:short"}
	seen := map[string]string{}
	for _, k := range keys {
		name := f.prefix + f.lockName(k)
		if len(name) > fencedlock.MaxNameLen {
			t.Errorf("lock name of %s is %d bytes", short.Quote(k), len(name))
		}
		if other, dup := seen[name]; dup {
			t.Errorf("keys %s and %s share lock %s", short.Quote(other), short.Quote(k), short.Quote(name))
		}
		seen[name] = k
	}
}

// TestConfigRejectsWhatPostgresCannotHold checks that names PostgreSQL
// would refuse at the first statement (SQLSTATE 22021) are refused at
// construction.
func TestConfigRejectsWhatPostgresCannotHold(t *testing.T) {
	t.Parallel()
	db := &pgxpool.Pool{}
	locks := memoryLocks(nil)
	bad := map[string]func() error{
		"table not UTF-8": func() error {
			tb := testTable
			tb.Name = "inv\xff"
			_, err := NewPostgres(db, tb)
			return err
		},
		"key column not UTF-8": func() error {
			tb := testTable
			tb.Key = "\xfe"
			_, err := NewFenced(locks, db, tb, nil)
			return err
		},
		"token column not UTF-8": func() error {
			_, err := NewFenced(locks, db, testTable, &FencedConfig{TokenColumn: "tok\xff"})
			return err
		},
		"lock prefix not UTF-8": func() error {
			_, err := NewFenced(locks, db, testTable, &FencedConfig{LockerConfig: fencedlock.LockerConfig{LockPrefix: "p\xff/"}})
			return err
		},
		"lock prefix with NUL": func() error {
			_, err := NewFenced(locks, db, testTable, &FencedConfig{LockerConfig: fencedlock.LockerConfig{LockPrefix: "p\x00/"}})
			return err
		},
		"lock prefix leaving no room for a hash": func() error {
			_, err := NewFenced(locks, db, testTable, &FencedConfig{LockerConfig: fencedlock.LockerConfig{LockPrefix: strings.Repeat("p", maxPrefixLen+1)}})
			return err
		},
	}
	for name, mk := range bad {
		if err := mk(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
