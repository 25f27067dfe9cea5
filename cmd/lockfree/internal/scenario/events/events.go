package events

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// eventsPerOp is how many events of one entity a produce sends.
const eventsPerOp = 5

// The events tables. event_queue is the stream (a topic's stand-in: the
// producers' events, per entity in sequence order); entity_state is what
// the consumers build from it; applied logs every application in the order
// applied, with the event's producing operation, and has no unique
// constraint on purpose: a duplicate must reach the check. The Kafka
// consumers also log the worker that applied each event (applied_by) and,
// for the inbox, the partition's owner as the write ran (owner).
// progress_regressions logs, by a trigger, every write that moved the
// lock-based consumers' progress (kafkawriter's entity_progress: per entity,
// the offset of the last event applied; the fenced twin's, and the unfenced
// twins' in events_group.go) back.
const (
	sqlEventsTables = `CREATE TABLE entity_state (
	entity        text   PRIMARY KEY,
	last_seq      bigint NOT NULL DEFAULT 0,
	fencing_token bigint NOT NULL DEFAULT 0
);
CREATE TABLE event_queue (
	entity      text   NOT NULL,
	seq         bigint NOT NULL,
	produced_by text   NOT NULL,
	PRIMARY KEY (entity, seq)
);
CREATE TABLE applied (
	id          bigserial PRIMARY KEY,
	entity      text   NOT NULL,
	seq         bigint NOT NULL,
	prev_seq    bigint NOT NULL,
	produced_by text   NOT NULL,
	applied_by  text,
	owner       text
);
CREATE TABLE dead_letters (
	id     bigserial PRIMARY KEY,
	entity text   NOT NULL,
	seq    bigint NOT NULL,
	source text   NOT NULL
);
CREATE TABLE dead_letter_topics (
	topic   text PRIMARY KEY,
	source  text NOT NULL,
	brokers text NOT NULL
);
CREATE TABLE progress_regressions (
	id       bigserial PRIMARY KEY,
	name     text   NOT NULL,
	from_seq bigint NOT NULL,
	to_seq   bigint NOT NULL
);
CREATE FUNCTION log_progress_regression() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
	INSERT INTO progress_regressions (name, from_seq, to_seq) VALUES (OLD.name, OLD.last_seq, NEW.last_seq);
	RETURN NEW;
END $$;
CREATE TRIGGER progress_regression AFTER UPDATE ON lockfree_entity_progress
	FOR EACH ROW WHEN (NEW.last_seq < OLD.last_seq) EXECUTE FUNCTION log_progress_regression()`
	sqlEventsSeed = `INSERT INTO entity_state (entity)
	SELECT 'entity-' || c || '-' || k FROM generate_series(0, $1 - 1) AS c, generate_series(0, $2 - 1) AS k`
	sqlEventsApplied = `SELECT entity, seq, prev_seq, produced_by FROM applied ORDER BY id`
	// sqlEventsForeign lists the applications that committed while the
	// inbox named another owner of their partition.
	sqlEventsForeign = `SELECT entity, seq, applied_by, owner FROM applied
	WHERE owner IS NOT NULL AND owner <> applied_by ORDER BY id`
	sqlEventsRegressions = `SELECT name, from_seq, to_seq FROM progress_regressions ORDER BY id`
	sqlEventsProduce     = `INSERT INTO event_queue (entity, seq, produced_by)
	SELECT $1, s, $3 FROM generate_series($2::bigint, $2::bigint + $4 - 1) AS s`
	// sqlEventsState reads an entity's last applied number.
	sqlEventsState = `SELECT last_seq FROM entity_state WHERE entity = $1`
)

// events is the scenario of events that clients produce, each worker to
// its own entities in sequence order, and that consumers apply: the
// applications found after the run, in the order applied, and the dead
// letters are held to checkHostile — every acknowledged event applied
// exactly once, in order, per entity, but the poison ones, each
// dead-lettered once and never applied.
type events struct{}

func init() { engine.Register(events{}) }

func (events) Name() string { return "events" }
func (events) Order() int   { return 5 }
func (events) Description() string {
	return "clients produce the next events of their entities, 1 in 40 hostile; consumers apply them; every acknowledged event is applied exactly once, in order per entity, but a poison one, dead-lettered once and never applied"
}

// Harm is what a violation of the scenario is, in its verdicts' words.
func (events) Harm() engine.Harm {
	return engine.Harm{One: "event", Many: "events", Bad: "mis-applied %s (twice, never, or out of order)", None: "mis-applied none"}
}

// OnRequest: the default run of lockfree compare leaves the scenario out.
func (events) OnRequest() string {
	return "its consumers drain the backlog the producers left after the measured part, which takes its lock-based approaches tens of seconds on a loaded machine"
}
func (events) Migrations() []migrate.Migration { return kafkawriter.Migrations() }

// SkipFault: a crash means nothing here, whatever the approach.
func (events) SkipFault(f engine.Fault) string {
	if f == engine.Crash {
		return "its producers number each entity's events in process memory, and a replacement would number them again from the first, which the check must refuse whatever the approach"
	}
	return ""
}

func (events) Setup(ctx context.Context, db *pgxpool.Pool, s engine.Sizes) error {
	if _, err := db.Exec(ctx, sqlEventsTables); err != nil {
		return err
	}
	_, err := db.Exec(ctx, sqlEventsSeed, s.Clients, s.Keys)
	return err
}

func (events) Check(ctx context.Context, db *pgxpool.Pool, ops []history.Op, _ engine.Sizes) (*history.Findings, error) {
	rows, err := db.Query(ctx, sqlEventsApplied)
	if err != nil {
		return nil, err
	}
	var applied []history.Effect
	e := history.Effect{HasPrev: true}
	if _, err := pgx.ForEachRow(rows, []any{&e.Key, &e.Seq, &e.Prev, &e.By}, func() error {
		applied = append(applied, e)
		return nil
	}); err != nil {
		return nil, err
	}
	letters, err := deadLetters(ctx, db)
	if err != nil {
		return nil, err
	}
	rep, err := checkHostile(ops, applied, letters)
	if err != nil {
		return nil, err
	}
	if err := foreignWrites(ctx, db, rep); err != nil {
		return nil, err
	}
	return rep, progressRegressions(ctx, db, rep)
}

// superseded is the anomaly of an application that committed while the
// inbox named another owner of its partition: a zombie consumer's
// transaction went through. Delivery may not see it — the event applied
// once, in order — but a consumer that writes after another took its
// partition over is what the inbox exists to refuse.
const superseded history.Anomaly = "superseded owner's write"

// foreignWrites adds to rep the applications that committed while another
// consumer owned their partition.
func foreignWrites(ctx context.Context, db *pgxpool.Pool, rep *history.Findings) error {
	rows, err := db.Query(ctx, sqlEventsForeign)
	if err != nil {
		return err
	}
	var entity, by, owner string
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&entity, &seq, &by, &owner}, func() error {
		rep.Add(history.Violation{Key: entity, Anomaly: superseded,
			Text: fmt.Sprintf("event %d of key %s was applied by %s and committed while %s owned its partition", seq, entity, by, owner)})
		return nil
	})
	return err
}

// regressed is the anomaly of a progress record moved back: a lock-based
// consumer recorded an entity's events as applied up to an offset below the
// one recorded before. Delivery may not see it — nothing was applied twice
// yet — but the record is what decides which events a later delivery
// applies, and every event between the two offsets would be applied again.
const regressed history.Anomaly = "progress moved back"

// progressRegressions adds to rep the writes that moved an entity's
// progress back.
func progressRegressions(ctx context.Context, db *pgxpool.Pool, rep *history.Findings) error {
	rows, err := db.Query(ctx, sqlEventsRegressions)
	if err != nil {
		return err
	}
	var name string
	var from, to int64
	_, err = pgx.ForEachRow(rows, []any{&name, &from, &to}, func() error {
		entity := lockEntity(name)
		rep.Add(history.Violation{Key: entity, Anomaly: regressed,
			Text: fmt.Sprintf("the progress of %s moved back from offset %d to %d: a delivery of the events between would apply them again", entity, from, to)})
		return nil
	})
	return err
}

// producer is a worker's producing side: its own entities, and the next
// sequence number of each. A number sent once is never sent again, whatever
// the outcome, so that a late delivery of an uncertain produce cannot clash.
type producer struct {
	env  *engine.Env
	next []int64 // by entity
}

func newProducer(env *engine.Env) *producer {
	return &producer{env: env, next: make([]int64, env.Keys)}
}

// entityName is the name of worker client's entity k.
func entityName(client, k int) string {
	return "entity-" + strconv.Itoa(client) + "-" + strconv.Itoa(k)
}

// start invokes the produce of the next events of a random entity of the
// worker's and returns their sequence numbers.
func (p *producer) start(ctx context.Context) (context.Context, *engine.Invocation, int64, error) {
	return p.invoke(ctx, p.env.Rand.IntN(p.env.Keys))
}

// invoke invokes the produce of the next events of the worker's entity k
// and returns their sequence numbers.
func (p *producer) invoke(ctx context.Context, k int) (context.Context, *engine.Invocation, int64, error) {
	first := p.next[k] + 1
	p.next[k] += eventsPerOp
	in := history.ProduceInput{}
	for s := first; s < first+eventsPerOp; s++ {
		in.Seqs = append(in.Seqs, s)
	}
	ctx, op, err := p.env.Invoke(ctx, entityName(p.env.Client, k), history.KindProduce, in)
	return ctx, op, first, err
}

// produce sends the next events of a random entity to the stream.
func (p *producer) produce(ctx context.Context) error {
	ctx, op, first, err := p.start(ctx)
	if err != nil {
		return err
	}
	// The insert is the produce's write: its error is classified as
	// sent, not as one before the operation reached its write.
	op.ReachedWrite()
	_, err = p.env.DB.Exec(ctx, sqlEventsProduce, op.Key(), first, op.ID(), eventsPerOp)
	return op.Finish(nil, err)
}
