package documents

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/occ"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// The documents tables. version is occ's; doc_version and head are the
// document as its writers computed them from what they read — the Document
// model's state, which no approach may bump on its own: a write based on a
// stale read shows as two writes based on one state. documents_gone holds
// the state of each deleted document: the version and name of the delete
// that removed it, which a create is based on. A delete writes it in the
// transaction that deletes the row. Every document has its entry from the
// start (so that a delete can lock it before the row); while the row
// exists the entry is not the document's state, the row is.
//
// occ's Insert starts a row at version 1, so a client that read version 1
// of a document deleted since would match the document created again (the
// ABA that docs/occ.md warns of). The schema keeps occ's version across a
// deletion instead — each delete records the deleted row's version in
// documents_gone, and the trigger starts a created row one above it — as a
// schema that deletes and creates rows of one key under occ must.
const (
	sqlDocumentsTable = `CREATE TABLE documents (
	id            text   PRIMARY KEY,
	version       bigint NOT NULL DEFAULT 1,
	doc_version   bigint NOT NULL DEFAULT 0,
	head          text   NOT NULL DEFAULT '',
	fencing_token bigint NOT NULL DEFAULT 0
);
CREATE TABLE documents_gone (
	id            text   PRIMARY KEY,
	doc_version   bigint NOT NULL,
	head          text   NOT NULL,
	version       bigint NOT NULL DEFAULT 0,
	fencing_token bigint NOT NULL DEFAULT 0
);
CREATE FUNCTION documents_keep_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.version := coalesce((SELECT version FROM documents_gone WHERE id = NEW.id), 0) + 1;
	RETURN NEW;
END $$;
CREATE TRIGGER documents_keep_version BEFORE INSERT ON documents
	FOR EACH ROW EXECUTE FUNCTION documents_keep_version()`
	sqlDocumentsSeed     = `INSERT INTO documents (id) SELECT 'doc-' || i FROM generate_series(0, $1 - 1) AS i`
	sqlDocumentsSeedGone = `INSERT INTO documents_gone (id, doc_version, head) SELECT id, 0, '' FROM documents`
	sqlDocumentsFinal    = `SELECT id, doc_version, head, false FROM documents
UNION ALL
SELECT id, doc_version, head, true FROM documents_gone g WHERE NOT EXISTS (SELECT FROM documents d WHERE d.id = g.id)
ORDER BY id`
	// sqlDocumentsGone reads a deleted document's state.
	sqlDocumentsGone = `SELECT doc_version, head FROM documents_gone WHERE id = $1`
	// sqlDocumentsGoneShare reads it and keeps it until the transaction
	// ends: no delete can complete meanwhile, so a create that finds the
	// row absent at its insert was based on the current deleted state.
	sqlDocumentsGoneShare = sqlDocumentsGone + ` FOR SHARE`
	// sqlDocumentsBury records a delete: the deleted state it leaves, and
	// the occ version of the row it deletes.
	sqlDocumentsBury = `INSERT INTO documents_gone (id, doc_version, head, version) VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO UPDATE SET doc_version = EXCLUDED.doc_version, head = EXCLUDED.head, version = EXCLUDED.version`
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

// created is the document that the create named name writes on the deleted
// state gone.
func created(key, name string, gone history.DocState) document {
	return document{ID: key, DocVersion: gone.Version + 1, Head: name}
}

// rowQuerier is a pool or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readGone reads key's deleted state with sql (sqlDocumentsGone, or
// sqlDocumentsGoneShare in a transaction).
func readGone(ctx context.Context, db rowQuerier, sql, key string) (history.DocState, error) {
	gone := history.DocState{Deleted: true}
	err := db.QueryRow(ctx, sql, key).Scan(&gone.Version, &gone.Head)
	return gone, err
}

// documents is the scenario of documents that clients edit by reading them
// and writing them back, delete, and create again: each operation records
// the state it was based on, and the history is held to the Document model,
// per document, with a final read of each. A delete is an edit whose state
// is deleted, a create an edit of a deleted document: a double create or a
// delete of a changed document is a lost update.
type documents struct{}

func init() { engine.Register(documents{}) }

func (documents) Name() string { return "documents" }
func (documents) Order() int   { return 2 }
func (documents) Description() string {
	return "clients edit a random document (read, change, write back), delete it one time in 8, and create it when they find it deleted; every edit, delete and create is linearizable: no accepted one overwritten, none present that was refused"
}

// Harm is what a violation of the scenario is, in its verdicts' words.
func (documents) Harm() engine.Harm {
	return engine.Harm{One: "anomaly", Many: "anomalies", Bad: "showed %s (an edit lost, or an order no sequential document allows)", None: "showed none"}
}

// Migrations: the alternative's probed edits (idProber) record their
// operation IDs in occ's operations table.
func (documents) Migrations() []migrate.Migration { return occ.Migrations() }

// FailoverVictim: the failover fault runs on documents, whose clients, on
// one key, write the victim's row in every operation: any key will do.
func (documents) FailoverVictim() string { return "" }

func (documents) Setup(ctx context.Context, db *pgxpool.Pool, s engine.Sizes) error {
	if _, err := db.Exec(ctx, sqlDocumentsTable); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, sqlDocumentsSeed, s.Keys); err != nil {
		return err
	}
	_, err := db.Exec(ctx, sqlDocumentsSeedGone)
	return err
}

// Check adds a read of every document's final state to the history, as a
// client of its own, and holds the history to the Document model.
func (documents) Check(ctx context.Context, db *pgxpool.Pool, ops []history.Op, s engine.Sizes) (*history.Findings, error) {
	rows, err := db.Query(ctx, sqlDocumentsFinal)
	if err != nil {
		return nil, err
	}
	var st history.DocState
	var id string
	now := history.Now()
	seq := int64(0)
	_, err = pgx.ForEachRow(rows, []any{&id, &st.Version, &st.Head, &st.Deleted}, func() error {
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

// docEdit starts a client's next operation on a random document: its name
// is the client's lane in the history (a replacement of a crashed worker
// has its own) and its own count of operations, unique among the
// document's. One time in deleteOdds it deletes the document (del);
// otherwise it edits it, or creates it if it finds it deleted.
func docEdit(ctx context.Context, env *engine.Env, n *int) (_ context.Context, _ *engine.Invocation, name string, del bool, _ error) {
	*n++
	name = "c" + strconv.Itoa(env.Lane()) + "-" + strconv.Itoa(*n)
	del = env.Rand.IntN(deleteOdds) == 0
	key := engine.Key("doc-", env.Rand.IntN(env.Keys))
	if d := env.Directed(); strings.HasPrefix(d, "doc-") {
		key = d // a taker
	}
	ctx, op, err := env.Invoke(ctx, key, history.KindEdit, history.DocInput{Edit: name, Delete: del})
	return ctx, op, name, del, err
}

// deleteOdds is one in how many operations deletes its document.
const deleteOdds = 8

// errDocumentGone is the refusal of a delete of a document that is deleted
// already, by the approaches that are not occ: the same error occ returns.
var errDocumentGone = occ.ErrNotFound
