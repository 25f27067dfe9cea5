package harness

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/migrate"
)

// The documents table. version is occ's; doc_version and head are the
// document as its writers computed them from what they read — the Document
// model's state, which no approach may bump on its own: a write based on a
// stale read shows as two writes based on one state.
const (
	sqlDocumentsTable = `CREATE TABLE documents (
	id            text   PRIMARY KEY,
	version       bigint NOT NULL DEFAULT 1,
	doc_version   bigint NOT NULL DEFAULT 0,
	head          text   NOT NULL DEFAULT '',
	fencing_token bigint NOT NULL DEFAULT 0
)`
	sqlDocumentsSeed  = `INSERT INTO documents (id) SELECT 'doc-' || i FROM generate_series(0, $1 - 1) AS i`
	sqlDocumentsFinal = `SELECT id, doc_version, head FROM documents ORDER BY id`
)

// document is a row of the documents table, as occ maps it.
type document struct {
	ID         string `db:"id"`
	Version    int64  `db:"version"`
	DocVersion int64  `db:"doc_version"`
	Head       string `db:"head"`
}

// edit applies the edit named name to d and returns the state it was based
// on.
func (d *document) edit(name string) history.DocState {
	based := history.DocState{Version: d.DocVersion, Head: d.Head}
	d.DocVersion++
	d.Head = name
	return based
}

// documents is the scenario of documents that clients edit by reading them
// and writing them back: each edit records the state it was based on, and
// the history is held to the Document model, per document, with a final
// read of each.
type documents struct{}

func init() { Register(documents{}) }

func (documents) Name() string { return "documents" }
func (documents) Order() int   { return 2 }
func (documents) Description() string {
	return "clients edit a random document (read, change, write back); every edit is linearizable: no accepted edit overwritten, none present that was refused"
}
func (documents) Migrations() []migrate.Migration { return nil }

func (documents) Setup(ctx context.Context, db *pgxpool.Pool, s Sizes) error {
	if _, err := db.Exec(ctx, sqlDocumentsTable); err != nil {
		return err
	}
	_, err := db.Exec(ctx, sqlDocumentsSeed, s.Keys)
	return err
}

// Check adds a read of every document's final state to the history, as a
// client of its own, and holds the history to the Document model.
func (documents) Check(ctx context.Context, db *pgxpool.Pool, ops []history.Op, s Sizes) (*history.Report, error) {
	rows, err := db.Query(ctx, sqlDocumentsFinal)
	if err != nil {
		return nil, err
	}
	var st history.DocState
	var id string
	now := history.Now()
	seq := int64(0)
	_, err = pgx.ForEachRow(rows, []any{&id, &st.Version, &st.Head}, func() error {
		out, err := encode(st)
		seq++
		ops = append(ops, history.Op{Client: s.Clients, Seq: seq, Key: id, Kind: history.KindRead,
			Output: out, Call: now, Return: now, Outcome: history.OK})
		return err
	})
	if err != nil {
		return nil, err
	}
	return history.Check(ctx, history.Document{}, ops, history.Config{Timeout: 30 * time.Second})
}

// docEdit starts a client's next edit of a random document: its name is
// the client and its own count of edits, unique among the document's.
func docEdit(ctx context.Context, env *Env, n *int) (context.Context, *Op, string, error) {
	*n++
	name := "c" + strconv.Itoa(env.Client) + "-" + strconv.Itoa(*n)
	ctx, op, err := env.Invoke(ctx, Key("doc-", env.Rand.IntN(env.Keys)), history.KindEdit, history.DocInput{Edit: name})
	return ctx, op, name, err
}
