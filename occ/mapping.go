package occ

import (
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/internal/opid"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
)

// TableConfig maps a row type onto a table. A nil *TableConfig, like the
// zero value, means the defaults. Columns are the struct's fields with a `db:"column"` tag (fields
// of embedded structs included; untagged fields and `db:"-"` are ignored);
// they are found by reflection once, when the store is constructed, which is
// also when a bad mapping is reported (an ErrInvalid). TableConfig is a
// value, safe to copy.
type TableConfig struct {
	// Schema qualifies the table's name. Ignored by Memory. Defaults to the
	// connection's search_path.
	Schema string
	// Key is the column that identifies a row: the primary key or a
	// unique column (Insert relies on ON CONFLICT over it). Its field's
	// type is the store's key type K. Defaults to "id".
	Key string
	// Version is the bigint column holding the row version (NOT NULL,
	// starting at 1); its field must be an int, int32 or int64. Defaults to
	// "version".
	Version string
	// MeterProvider receives the metrics of Update on this store
	// (docs/occ.md, "Metrics"). Defaults to none: nothing is recorded.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span for each Update on this store.
	// Defaults to none: no span is started.
	TracerProvider trace.TracerProvider
	// Tables says where the operations table of operation IDs (WithID,
	// Migrations) lives. Ignored by Memory. Defaults to the connection's
	// search_path and the prefix "lockfree_".
	Tables migrate.Names
	// Retention is how long an operation ID is good after the time it
	// carries: within it, a retry with the ID returns the recorded
	// outcome; after it, the ID is refused (ErrExpired) and Purge may
	// delete its record. Every process using the operations table must use
	// the same Retention. At least one second. Defaults to 24 hours.
	Retention time.Duration
	// Clock tells Memory the age of operation IDs. Ignored by Postgres,
	// which asks the database's clock. Defaults to the system clock.
	Clock clock.Clock
}

func (c *TableConfig) withDefaults() TableConfig {
	var d TableConfig
	if c != nil {
		d = *c
	}
	if d.Key == "" {
		d.Key = "id"
	}
	if d.Version == "" {
		d.Version = "version"
	}
	if d.Retention == 0 {
		d.Retention = opid.DefaultRetention
	}
	if d.Clock == nil {
		d.Clock = clock.System()
	}
	return d
}

func (c TableConfig) validate() error {
	if err := validIdent("schema", c.Schema, false); err != nil {
		return err
	}
	if err := validIdent("key column", c.Key, true); err != nil {
		return err
	}
	if err := validIdent("version column", c.Version, true); err != nil {
		return err
	}
	if c.Key == c.Version {
		return fmt.Errorf("%w: key and version are both column %s", ErrInvalid, short.Quote(c.Key))
	}
	if err := c.Tables.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if c.Retention < opid.MinRetention {
		return fmt.Errorf("%w: Retention %v must be ≥ %v", ErrInvalid, c.Retention, opid.MinRetention)
	}
	return nil
}

// maxIdentifier is PostgreSQL's NAMEDATALEN-1: longer names are truncated
// silently by the server.
const maxIdentifier = 63

func validIdent(what, s string, required bool) error {
	switch {
	case s == "" && required:
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	case len(s) > maxIdentifier:
		return fmt.Errorf("%w: %s %s is longer than %d bytes", ErrInvalid, what, short.Quote(s), maxIdentifier)
	case !utf8.ValidString(s) || strings.ContainsRune(s, 0):
		return fmt.Errorf("%w: %s %s is not a valid identifier", ErrInvalid, what, short.Quote(s))
	}
	return nil
}

// column is one db-tagged field.
type column struct {
	name  string
	index []int
}

// mapping is the struct layout of a row type with keys of type K, found once
// at construction.
type mapping[K comparable] struct {
	cfg     TableConfig // defaults filled in
	typ     reflect.Type
	cols    []column // in field order
	key     int      // index into cols
	version int      // index into cols
	keyKind reflect.Kind
	tel     *occTelemetry // the store's, from cfg's providers
}

// newMapping checks cfg and lays T out as it says.
func newMapping[K comparable, T any](cfg *TableConfig) (*mapping[K], error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	typ := reflect.TypeFor[T]()
	if typ.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: row type %v is not a struct", ErrInvalid, typ)
	}
	m := &mapping[K]{cfg: c, typ: typ, key: -1, version: -1, tel: noTelemetry}
	if c.MeterProvider != nil || c.TracerProvider != nil {
		m.tel = newTelemetry(c.MeterProvider, c.TracerProvider)
	}
	if err := m.collect(typ, nil, map[string]bool{}); err != nil {
		return nil, err
	}
	for i, col := range m.cols {
		switch col.name {
		case c.Key:
			m.key = i
		case c.Version:
			m.version = i
		}
	}
	if m.key < 0 {
		return nil, fmt.Errorf("%w: %v has no field tagged db:%s (the key column)", ErrInvalid, typ, short.Quote(c.Key))
	}
	if m.version < 0 {
		return nil, fmt.Errorf("%w: %v has no field tagged db:%s (the version column)", ErrInvalid, typ, short.Quote(c.Version))
	}
	if err := m.checkKeyType(); err != nil {
		return nil, err
	}
	switch typ.FieldByIndex(m.cols[m.version].index).Type.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
	default:
		return nil, fmt.Errorf("%w: version field of %v must be int, int32 or int64", ErrInvalid, typ)
	}
	return m, nil
}

// checkKeyType requires the key field to be of the key type K, and K to be a
// value that identifies a row: pointers and interfaces compare by identity or
// dynamic type, not by what a table holds.
func (m *mapping[K]) checkKeyType() error {
	kt := reflect.TypeFor[K]()
	if ft := m.typ.FieldByIndex(m.cols[m.key].index).Type; ft != kt {
		return fmt.Errorf("%w: key field of %v is a %v, not the store's key type %v", ErrInvalid, m.typ, ft, kt)
	}
	if kt.Kind() == reflect.Interface || kt.Kind() == reflect.Pointer {
		return fmt.Errorf("%w: key type %v is not a comparable value", ErrInvalid, kt)
	}
	m.keyKind = kt.Kind()
	return nil
}

func (m *mapping[K]) collect(typ reflect.Type, prefix []int, seen map[string]bool) error {
	for i := range typ.NumField() {
		f := typ.Field(i)
		index := append(append([]int(nil), prefix...), i)
		tag, tagged := f.Tag.Lookup("db")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if !tagged || name == "" {
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				if err := m.collect(f.Type, index, seen); err != nil {
					return err
				}
			}
			continue
		}
		if !f.IsExported() {
			return fmt.Errorf("%w: field %s of %v is tagged but unexported", ErrInvalid, f.Name, m.typ)
		}
		if err := validIdent("column", name, true); err != nil {
			return err
		}
		if seen[name] {
			return fmt.Errorf("%w: column %s appears twice in %v", ErrInvalid, short.Quote(name), m.typ)
		}
		seen[name] = true
		m.cols = append(m.cols, column{name: name, index: index})
	}
	return nil
}

// keyOf returns the key field of row (a struct value of m.typ).
func (m *mapping[K]) keyOf(row reflect.Value) K {
	return row.FieldByIndex(m.cols[m.key].index).Interface().(K)
}

func (m *mapping[K]) setVersion(row reflect.Value, v int64) {
	row.FieldByIndex(m.cols[m.version].index).SetInt(v)
}

// rowKey returns the key field of row, checked.
func (m *mapping[K]) rowKey(row reflect.Value) (K, error) {
	k := m.keyOf(row)
	return k, m.checkKey(k)
}

// str returns a key of a string type as a string: a plain string without
// reflection, a named string type through it.
func (m *mapping[K]) str(k K) string {
	if s, ok := any(k).(string); ok {
		return s
	}
	return reflect.ValueOf(k).String()
}

// checkKey rejects a string key that PostgreSQL text cannot hold (NUL,
// invalid UTF-8: SQLSTATE 22021) or that no caller means (empty, longer
// than MaxKeyLen), so that both backends refuse it before any statement.
// Keys of other types need no check: their type says what they hold.
func (m *mapping[K]) checkKey(k K) error {
	if m.keyKind != reflect.String {
		return nil
	}
	s := m.str(k)
	switch {
	case s == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(s) > MaxKeyLen:
		return fmt.Errorf("%w: key %s is %d bytes, longer than %d", ErrInvalid, short.Quote(s), len(s), MaxKeyLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: key %s is not valid UTF-8", ErrInvalid, short.Quote(s))
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: key %s contains a NUL byte", ErrInvalid, short.Quote(s))
	}
	return nil
}

// isInt reports whether the key type is an integer type.
func (m *mapping[K]) isInt() bool {
	return m.keyKind >= reflect.Int && m.keyKind <= reflect.Uint64
}

// text returns k as ConflictError.Key and messages show it: a string as it
// is, an integer in decimal (%d, never a String method), else %v.
func (m *mapping[K]) text(k K) string {
	switch {
	case m.keyKind == reflect.String:
		return m.str(k)
	case m.isInt():
		return fmt.Sprintf("%d", any(k))
	}
	return fmt.Sprintf("%v", any(k))
}

// quote returns k quoted and shortened for an error message.
func (m *mapping[K]) quote(k K) string { return short.Quote(m.text(k)) }

// unambiguous returns k as text that no other key of type K shares: %#v
// quotes the strings inside a struct, where %v would let {"a b", "c"} and
// {"a", "b c"} print alike.
func (m *mapping[K]) unambiguous(k K) string {
	if m.keyKind == reflect.String || m.isInt() {
		return m.text(k)
	}
	return fmt.Sprintf("%#v", any(k))
}
