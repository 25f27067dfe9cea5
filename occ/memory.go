package occ

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	"github.com/google/uuid"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/opid"
)

// Memory is a Store in this process's memory, with the same contract as
// Postgres: for tests and single-process programs. It keeps only the
// db-tagged fields of a row, deep-copied on the way in and out (slices, maps,
// pointers and exported struct fields; not unexported fields or interface
// values), so a caller changing a loaded row changes nothing stored. It is
// safe for concurrent use; the zero value is not usable, call NewMemory.
type Memory[K comparable, T any] struct {
	m *mapping[K]

	mu   sync.Mutex
	rows map[K]*memRow[T]
	ops  map[uuid.UUID]record // the writes with an ID
}

type memRow[T any] struct {
	val     T
	version int64
	token   int64 // the highest fencing token that read or wrote it (Fenced)
}

// NewMemory returns an empty store of rows of type T with keys of type K,
// mapped as cfg says (a nil cfg: the key column "id", the version column
// "version"; Schema and Tables are ignored, Clock and Retention govern
// operation IDs). A bad mapping is an ErrInvalid.
func NewMemory[K comparable, T any](cfg *TableConfig) (*Memory[K, T], error) {
	m, err := newMapping[K, T](cfg)
	if err != nil {
		return nil, err
	}
	return &Memory[K, T]{m: m, rows: map[K]*memRow[T]{}, ops: map[uuid.UUID]record{}}, nil
}

func (s *Memory[K, T]) layout() *mapping[K] { return s.m }

func (s *Memory[K, T]) notFound(k K) error {
	return fmt.Errorf("%w: key %s", ErrNotFound, s.m.quote(k))
}

func (s *Memory[K, T]) conflict(k K, expected, actual int64) error {
	return &ConflictError{Key: s.m.text(k), Expected: expected, Actual: actual}
}

// Load implements Store.
func (s *Memory[K, T]) Load(ctx context.Context, key K) (T, int64, error) {
	var zero T
	if err := s.m.checkKey(key); err != nil {
		return zero, 0, err
	}
	if err := ctx.Err(); err != nil {
		return zero, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[key]
	if r == nil {
		return zero, 0, s.notFound(key)
	}
	return deepCopy(r.val), r.version, nil
}

// Insert implements Store.
func (s *Memory[K, T]) Insert(ctx context.Context, row T, opts ...Option) (int64, error) {
	k, err := s.m.rowKey(reflect.ValueOf(row))
	if err != nil {
		return 0, err
	}
	c, withID, err := s.call(opts, OpInsert, k)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.once(c, withID, func() (int64, error) {
		if r := s.rows[k]; r != nil && !failpoint.Mutant("occ.insert.conflict") {
			return 0, s.conflict(k, 0, r.version)
		}
		s.rows[k] = &memRow[T]{val: s.stored(row, 1), version: 1}
		return 1, nil
	})
}

// call returns the write's call for opts' ID.
func (s *Memory[K, T]) call(opts []Option, op string, k K) (call, bool, error) {
	return newCall(newOptions(opts), memoryWhere, op, s.m.text(k), s.m.unambiguous(k))
}

// memoryWhere names a Memory in fingerprints.
const memoryWhere = "memory"

// once runs a write, s.mu held: without an ID, write alone; with one, the
// recorded outcome when there is one, otherwise write, recorded when it
// applied.
func (s *Memory[K, T]) once(c call, withID bool, write func() (int64, error)) (int64, error) {
	if !withID {
		return write()
	}
	if v, ok, err := s.recorded(c); ok {
		return v, err
	}
	v, err := write()
	if err == nil {
		s.ops[c.id] = record{fingerprint: c.fingerprint, op: c.op, key: c.key, outcome: recApplied, version: v, minted: c.minted}
	}
	return v, err
}

// recorded answers c from its record, s.mu held; ok is false when c's ID
// is live and unrecorded.
func (s *Memory[K, T]) recorded(c call) (_ int64, ok bool, _ error) {
	age := opid.AgeOf(c.minted, s.m.cfg.Clock.Now(), s.m.cfg.Retention)
	if age == opid.Expired && failpoint.Mutant("occ.id.expired") {
		age = opid.Live
	}
	if age != opid.Live {
		return 0, true, ageError(c.id, age)
	}
	if r, ok := s.ops[c.id]; ok && !failpoint.Mutant("occ.id.replay") {
		v, err := c.replay(r, failpoint.Mutant("occ.id.fingerprint"))
		return v, true, err
	}
	return 0, false, nil
}

// loadID implements idLoader.
func (s *Memory[K, T]) loadID(ctx context.Context, key K, o options) (T, int64, error) {
	var zero T
	if err := s.m.checkKey(key); err != nil {
		return zero, 0, err
	}
	c, _, err := newCall(o, memoryWhere, OpUpdate, s.m.text(key), s.m.unambiguous(key))
	if err != nil {
		return zero, 0, err
	}
	s.mu.Lock()
	if v, ok, err := s.recorded(c); ok {
		s.mu.Unlock()
		if err != nil {
			return zero, 0, err
		}
		return zero, 0, replayed{v}
	}
	s.mu.Unlock()
	return s.Load(ctx, key)
}

// Resolve implements Recorder, on the store's Clock.
func (s *Memory[K, T]) Resolve(ctx context.Context, id uuid.UUID) (Outcome, error) {
	minted, err := validID(id)
	if err != nil {
		return Outcome{}, err
	}
	if err := ctx.Err(); err != nil {
		return Outcome{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	age := opid.AgeOf(minted, s.m.cfg.Clock.Now(), s.m.cfg.Retention)
	if age == opid.Expired && failpoint.Mutant("occ.id.expired") {
		age = opid.Live
	}
	if age != opid.Live {
		return Outcome{}, ageError(id, age)
	}
	r, ok := s.ops[id]
	if !ok {
		r = record{outcome: recAbandoned, minted: minted}
		if !failpoint.Mutant("occ.resolve.abandon") { // the mutant leaves the ID free
			s.ops[id] = r
		}
	}
	return r.result(id), nil
}

// Purge implements Recorder, on the store's Clock.
func (s *Memory[K, T]) Purge(ctx context.Context, limit int) (int, error) {
	if err := validLimit(limit); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.m.cfg.Clock.Now()
	n := 0
	for id, r := range s.ops {
		if n == limit {
			break
		}
		if opid.AgeOf(r.minted, now, s.m.cfg.Retention) == opid.Expired || failpoint.Mutant("occ.purge.expired") {
			delete(s.ops, id)
			n++
		}
	}
	return n, nil
}

// stored returns the copy of row kept at version v: its columns only, as a
// table would keep it.
func (s *Memory[K, T]) stored(row T, v int64) T {
	var c T
	src, dst := reflect.ValueOf(row), reflect.ValueOf(&c).Elem()
	for _, col := range s.m.cols {
		dst.FieldByIndex(col.index).Set(copyValue(src.FieldByIndex(col.index)))
	}
	s.m.setVersion(dst, v)
	return c
}

// Update implements Store.
func (s *Memory[K, T]) Update(ctx context.Context, row T, version int64, opts ...Option) (int64, error) {
	if err := validVersion(version); err != nil {
		return 0, err
	}
	k, err := s.m.rowKey(reflect.ValueOf(row))
	if err != nil {
		return 0, err
	}
	c, withID, err := s.call(opts, OpUpdate, k)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.once(c, withID, func() (int64, error) {
		r := s.rows[k]
		switch {
		case r == nil:
			return 0, s.notFound(k)
		case r.version != version && !failpoint.Mutant("occ.update.version"):
			return 0, s.conflict(k, version, r.version)
		}
		r.version++
		r.val = s.stored(row, r.version)
		return r.version, nil
	})
}

// Delete implements Store.
func (s *Memory[K, T]) Delete(ctx context.Context, key K, version int64, opts ...Option) error {
	if err := s.m.checkKey(key); err != nil {
		return err
	}
	if err := validVersion(version); err != nil {
		return err
	}
	c, withID, err := s.call(opts, OpDelete, key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err = s.once(c, withID, func() (int64, error) {
		r := s.rows[key]
		switch {
		case r == nil:
			return 0, s.notFound(key)
		case r.version != version && !failpoint.Mutant("occ.delete.version"):
			return 0, s.conflict(key, version, r.version)
		}
		delete(s.rows, key)
		return r.version, nil
	})
	return err
}

// fencedLoad is the Fenced twin's read, as fencedlock.Fence.Read does it: it
// raises key's fencing token to token and returns the row, or a
// *fencedlock.FencedError when the row has seen a higher token.
func (s *Memory[K, T]) fencedLoad(ctx context.Context, key K, token int64) (T, int64, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[key]
	switch {
	case r == nil:
		return zero, 0, s.notFound(key)
	case token < r.token:
		return zero, 0, &fencedlock.FencedError{Presented: token, Required: r.token}
	}
	if !failpoint.Mutant("occ.fenced.read.stamp") {
		r.token = token
	}
	return deepCopy(r.val), r.version, nil
}

// fencedWrite is the Fenced twin's write, as fencedlock.Fence.Update does it:
// a token below the row's highest is rejected with a
// *fencedlock.FencedError.
func (s *Memory[K, T]) fencedWrite(ctx context.Context, row T, _, token int64) (int64, error) {
	k := s.m.keyOf(reflect.ValueOf(row))
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[k]
	switch {
	case r == nil:
		return 0, s.notFound(k)
	case token < r.token && !failpoint.Mutant("occ.fenced.write.token"):
		return 0, &fencedlock.FencedError{Presented: token, Required: r.token}
	}
	r.token = max(r.token, token)
	r.version++
	r.val = s.stored(row, r.version)
	return r.version, nil
}

func deepCopy[T any](v T) T {
	var out T
	o := reflect.ValueOf(&out).Elem()
	o.Set(copyValue(reflect.ValueOf(&v).Elem()))
	return out
}

// copyValue returns a copy of v that shares no slice, map or pointer target
// reachable through exported fields. Cycles are not supported.
func copyValue(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		p := reflect.New(v.Type().Elem())
		p.Elem().Set(copyValue(v.Elem()))
		return p
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		s := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			s.Index(i).Set(copyValue(v.Index(i)))
		}
		return s
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		m := reflect.MakeMapWithSize(v.Type(), v.Len())
		it := v.MapRange()
		for it.Next() {
			m.SetMapIndex(it.Key(), copyValue(it.Value()))
		}
		return m
	case reflect.Array:
		a := reflect.New(v.Type()).Elem()
		a.Set(v)
		for i := range v.Len() {
			a.Index(i).Set(copyValue(v.Index(i)))
		}
		return a
	case reflect.Struct:
		s := reflect.New(v.Type()).Elem()
		s.Set(v)
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				s.Field(i).Set(copyValue(v.Field(i)))
			}
		}
		return s
	}
	return v
}
