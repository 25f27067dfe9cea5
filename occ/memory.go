package occ

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// Memory is a Store in this process's memory, with the same contract as
// Postgres: for tests and single-process programs. It keeps only the
// db-tagged fields of a row, deep-copied on the way in and out (slices, maps, pointers and exported struct fields; not
// unexported fields or interface values), so a caller changing a loaded row
// changes nothing stored. It is safe for concurrent use; the zero value is
// not usable, call NewMemory.
type Memory[T any] struct {
	m *mapping

	mu   sync.Mutex
	rows map[any]*memRow[T]
}

type memRow[T any] struct {
	val     T
	version int64
	token   int64 // the fencing_token column, for the Fenced twin
}

// NewMemory returns an empty store for rows of type T, mapped as cfg says
// (only Key and Version matter; the zero TableConfig means "id" and
// "version"). A bad mapping is an ErrInvalid.
func NewMemory[T any](cfg TableConfig) (*Memory[T], error) {
	m, err := newMapping[T](cfg)
	if err != nil {
		return nil, err
	}
	return &Memory[T]{m: m, rows: map[any]*memRow[T]{}}, nil
}

func (s *Memory[T]) layout() *mapping { return s.m }

// Load implements Store.
func (s *Memory[T]) Load(ctx context.Context, key any) (T, int64, error) {
	var zero T
	k, err := s.m.normKey(key)
	if err != nil {
		return zero, 0, err
	}
	if err := ctx.Err(); err != nil {
		return zero, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[k]
	if r == nil {
		return zero, 0, fmt.Errorf("%w: key %s", ErrNotFound, quoteKey(key))
	}
	return deepCopy(r.val), r.version, nil
}

// Insert implements Store.
func (s *Memory[T]) Insert(ctx context.Context, row T) (int64, error) {
	k, err := s.m.rowKey(reflect.ValueOf(row))
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.rows[k]; r != nil {
		return 0, &ConflictError{Key: k, Expected: 0, Actual: r.version}
	}
	s.rows[k] = &memRow[T]{val: s.stored(row, 1), version: 1}
	return 1, nil
}

// stored returns the copy of row kept at version v: its columns only, as a
// table would keep it.
func (s *Memory[T]) stored(row T, v int64) T {
	var c T
	src, dst := reflect.ValueOf(row), reflect.ValueOf(&c).Elem()
	for _, col := range s.m.cols {
		dst.FieldByIndex(col.index).Set(copyValue(src.FieldByIndex(col.index)))
	}
	s.m.setVersion(dst, v)
	return c
}

// Update implements Store.
func (s *Memory[T]) Update(ctx context.Context, row T, version int64) (int64, error) {
	if err := validVersion(version); err != nil {
		return 0, err
	}
	k, err := s.m.rowKey(reflect.ValueOf(row))
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[k]
	switch {
	case r == nil:
		return 0, fmt.Errorf("%w: key %s", ErrNotFound, quoteKey(k))
	case r.version != version:
		return 0, &ConflictError{Key: k, Expected: version, Actual: r.version}
	}
	r.version++
	r.val = s.stored(row, r.version)
	return r.version, nil
}

// Delete implements Store.
func (s *Memory[T]) Delete(ctx context.Context, key any, version int64) error {
	k, err := s.m.normKey(key)
	if err != nil {
		return err
	}
	if err := validVersion(version); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[k]
	switch {
	case r == nil:
		return fmt.Errorf("%w: key %s", ErrNotFound, quoteKey(key))
	case r.version != version:
		return &ConflictError{Key: k, Expected: version, Actual: r.version}
	}
	delete(s.rows, k)
	return nil
}

// writeLocked is the Fenced twin's write: with fenced, like fencedlock.Fence
// (a token below the row's highest is rejected with a *FencedError); without,
// the naive unconditional write.
func (s *Memory[T]) writeLocked(ctx context.Context, row T, token int64, fenced bool) (int64, error) {
	k := s.m.keyOf(reflect.ValueOf(row))
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[k]
	switch {
	case r == nil:
		return 0, fmt.Errorf("%w: key %s", ErrNotFound, quoteKey(k))
	case fenced && token < r.token:
		return 0, &fencedlock.FencedError{Presented: token, Required: r.token}
	}
	if fenced {
		r.token = token
	}
	r.version++
	r.val = s.stored(row, r.version)
	return r.version, nil
}

// stamp raises key's fencing token to token (the fenced read of the twin),
// or returns a *fencedlock.FencedError when the row has seen a higher one.
func (s *Memory[T]) stamp(ctx context.Context, key any, token int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[key]
	switch {
	case r == nil:
		return fmt.Errorf("%w: key %s", ErrNotFound, quoteKey(key))
	case token < r.token:
		return &fencedlock.FencedError{Presented: token, Required: r.token}
	}
	r.token = token
	return nil
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
