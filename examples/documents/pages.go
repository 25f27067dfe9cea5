package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/examples/internal/demo"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/occ"
)

// pages is the document as the lock-based code sees it: the documents
// table, or a variable when running on the memory backend.
type pages interface {
	reset(ctx context.Context) error
	read(ctx context.Context) (string, error)
	write(ctx context.Context, body string) error
	fencedRead(ctx context.Context, token int64) (string, error)
	fencedWrite(ctx context.Context, token int64, body string) error
}

func newPages(db *pgxpool.Pool) pages {
	if db == nil {
		return &memPages{}
	}
	return pgPages{db}
}

// pgPages is the documents table.
type pgPages struct{ db *pgxpool.Pool }

// fence makes the documents table's reads and writes fenced by token.
var fence = fencedlock.Fence{Table: "documents", Key: "id", TokenColumn: "fencing_token"}

func (p pgPages) reset(ctx context.Context) error {
	_, err := p.db.Exec(ctx, `INSERT INTO documents (id, body) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET body = $2, version = 1, fencing_token = 0`, docID, title)
	return err
}

func (p pgPages) read(ctx context.Context) (body string, err error) {
	err = p.db.QueryRow(ctx, `SELECT body FROM documents WHERE id = $1`, docID).Scan(&body)
	return body, err
}

// write bumps the version too: while lock-based and optimistic writers
// coexist during the migration, a write that leaves the version alone is
// invisible to the optimistic ones, which would overwrite it.
func (p pgPages) write(ctx context.Context, body string) error {
	_, err := p.db.Exec(ctx, `UPDATE documents SET body = $2, version = version + 1 WHERE id = $1`, docID, body)
	return err
}

func (p pgPages) fencedRead(ctx context.Context, token int64) (body string, err error) {
	err = fence.Read(ctx, p.db, docID, token, "body", &body)
	return body, err
}

func (p pgPages) fencedWrite(ctx context.Context, token int64, body string) error {
	return fence.Update(ctx, p.db, docID, token, "body = $1, version = version + 1", body)
}

// memPages is the document in memory; its Row's gate plays the part of the
// token column.
type memPages struct{ demo.Row[string] }

func (p *memPages) reset(context.Context) error                { p.Set(title); return nil }
func (p *memPages) read(context.Context) (string, error)       { return p.Get(), nil }
func (p *memPages) write(_ context.Context, body string) error { p.Set(body); return nil }
func (p *memPages) fencedRead(_ context.Context, token int64) (string, error) {
	return p.FencedGet(token)
}
func (p *memPages) fencedWrite(_ context.Context, token int64, body string) error {
	return p.FencedUpdate(token, func(b *string) { *b = body })
}

// insertFresh (re)creates document id with only its title, at version 1.
func insertFresh(ctx context.Context, db *pgxpool.Pool, docs occ.Store[string, Document], id string) error {
	if db != nil {
		if _, err := db.Exec(ctx, `DELETE FROM documents WHERE id = $1`, id); err != nil {
			return err
		}
	} else if _, v, err := docs.Load(ctx, id); err == nil {
		if err := docs.Delete(ctx, id, v); err != nil {
			return err
		}
	}
	_, err := docs.Insert(ctx, Document{ID: id, Body: title})
	return err
}
