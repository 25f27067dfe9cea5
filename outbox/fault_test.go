package outbox_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/internal/testproc"
	"github.com/lockfree-go/lockfree/outbox"
)

// proxied returns a transport whose every connection to e's brokers goes
// through a proxy of its own, and those proxies.
func (e *env) proxied(t *testing.T) (*kafka.Transport, []*faultproxy.Proxy) {
	t.Helper()
	routes := map[string]string{}
	var proxies []*faultproxy.Proxy
	for _, b := range e.brokers {
		px, err := faultproxy.Start(b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		routes[b] = px.Addr()
		proxies = append(proxies, px)
	}
	tr := &kafka.Transport{Dial: faultproxy.Redirect(routes)}
	t.Cleanup(tr.CloseIdleConnections)
	return tr, proxies
}

// expectCopies fails t unless the topic holds more records than events
// were written: the fault published some twice.
func (e *env) expectCopies(t *testing.T) int64 {
	t.Helper()
	written := int64(len(e.written))
	var records int64
	waitFor(t, 60*time.Second, func() bool { records = e.records(t); return records > written })
	return records - written
}

// foil reads the topic with a consumer without Dedupe, which must apply the
// copies: the check can see what the fault did.
func (e *env) foil(t *testing.T, wantDisorder bool) {
	t.Helper()
	a := e.consume(t, "plain", false)
	if a.duplicates == 0 || wantDisorder && a.disorder == 0 {
		t.Fatalf("without Dedupe: %+v; want copies applied twice%s", a, map[bool]string{true: ", after newer events"}[wantDisorder])
	}
	t.Logf("without Dedupe: %v", a.err())
}

// A relay that pauses with its publish in flight past its lease — its
// produce request held on the way, its heartbeats held too — is replaced;
// its request lands after the new owner published those events and newer
// ones. The copies are dropped by the inbox: each event applied once, in
// order. Without Dedupe the copies are applied twice, after newer events.
func TestLatePublishOfAPausedRelay(t *testing.T) {
	t.Parallel()
	e, err := checkLatePublish(t)
	if err != nil {
		t.Fatal(err)
	}
	e.foil(t, true)
}

func checkLatePublish(t *testing.T) (*env, error) {
	e := newEnv(t, 2, 1)
	tr, proxies := e.proxied(t)
	p := &pauser{}
	tel := telemetrytest.New(t)
	cfg := relayConfig("a")
	cfg.Transport, cfg.PublishTimeout, cfg.MeterProvider = tr, time.Minute, tel.Meters
	a := e.relay(t, context.WithValue(ctx, pauseKey{}, p), cfg)
	e.write(t, 4, 1) // the relay learns the topic's layout
	e.waitPublished(t)

	for _, px := range proxies {
		px.Set(faultproxy.Hold, 0)
	}
	e.writeAtOnce(t, 4, 5)
	waitFor(t, 60*time.Second, func() bool { return held(proxies) > 0 })
	resume := p.pause()
	b := e.relay(t, ctx, relayConfig("b"))
	e.waitPublished(t) // by b, once a's lease expired
	e.write(t, 4, 5)
	e.waitPublished(t)
	for _, px := range proxies {
		px.Set(faultproxy.Pass, 0) // the held requests land now
	}
	resume()
	copies := e.expectCopies(t)
	waitFor(t, 60*time.Second, func() bool { s := a.Stats(); return s.Failed+s.Fenced+s.Moved > 0 })
	checkFencedMetric(t, tel, a)
	t.Logf("%d copies; a %+v, b %+v", copies, a.Stats(), b.Stats())
	return e, e.consume(t, "dedupe", true).err()
}

func held(proxies []*faultproxy.Proxy) (n int64) {
	for _, px := range proxies {
		n += px.Stats().Held
	}
	return n
}

// A relay that pauses between its publish and its delete past its lease
// is replaced; the new owner publishes the same events again, and newer
// ones. When the paused relay resumes, its delete is refused
// (ErrStaleEpoch), even though its membership lapsed meanwhile, and it
// gives the partition up without deleting anything. The inbox drops the
// copies; without Dedupe they are applied twice, after the first records.
func TestPausedRelayDeleteIsFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1)
	p := &pauser{}
	tel := telemetrytest.New(t)
	cfg := relayConfig("a")
	cfg.MeterProvider = tel.Meters
	a := e.relay(t, context.WithValue(ctx, pauseKey{}, p), cfg)
	e.write(t, 4, 1)
	// The relay counts a batch once its delete returned: after the outbox
	// is empty.
	waitFor(t, 60*time.Second, func() bool { return a.Stats().Published == 4 })
	before := a.Stats()

	reached, resume := p.pauseAtMark()
	e.writeAtOnce(t, 4, 3)
	select {
	case <-reached:
	case <-time.After(60 * time.Second):
		t.Fatal("the relay did not reach its delete")
	}
	b := e.relay(t, ctx, relayConfig("b"))
	e.waitPublished(t) // by b, once a's lease expired: the same 12 events
	e.write(t, 4, 2)
	e.waitPublished(t)
	resume()
	waitFor(t, 60*time.Second, func() bool { return a.Stats().Fenced > 0 })
	if s := a.Stats(); s.Published != before.Published || s.Fenced != 1 {
		t.Fatalf("the resumed relay: %+v, before the pause %+v; want its delete refused, once", s, before)
	}
	checkFencedMetric(t, tel, a)
	if copies := e.expectCopies(t); copies != 12 {
		t.Fatalf("%d copies, want the 12 events of the paused batch", copies)
	}
	t.Logf("a %+v, b %+v", a.Stats(), b.Stats())
	if err := e.consume(t, "dedupe", true).err(); err != nil {
		t.Fatal(err)
	}
	e.foil(t, true)
}

// The same with a real pause: a relay in a child process stops itself with
// SIGSTOP before its first publish, another relay takes its partitions
// over and publishes, and the stopped one is resumed. Either it publishes
// late — its delete is refused, and the inbox drops the copies — or it
// finds its lease lapsed before it publishes: nothing is applied twice
// either way.
func TestStoppedRelayProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 1)
	e.write(t, 4, 5)
	child := testproc.Start(t, "relay", "CHILD_MODE=stop-before-publish", "CHILD_NAME=child", "CHILD_PARTITIONS=2",
		"CHILD_DATABASE_URL="+e.db.URL, "CHILD_BROKERS="+e.brokers[0], "CHILD_TOPIC="+e.topic)
	child.Expect("stopping", 120*time.Second)
	b := e.relay(t, ctx, relayConfig("b"))
	e.waitPublished(t)
	e.write(t, 4, 5)
	e.waitPublished(t)
	child.Continue()
	how := child.Expect("gave up:", 120*time.Second)
	copies := e.records(t) - int64(len(e.written))
	t.Logf("the resumed relay gave up (%s); %d copies; b %+v", how, copies, b.Stats())
	if err := e.consume(t, "dedupe", true).err(); err != nil {
		t.Fatal(err)
	}
	if copies > 0 {
		e.foil(t, true)
	}
}

// A publish whose answer is lost — the broker wrote the records, the
// connection broke before its answer — is retried with the same events:
// Kafka holds them twice, the inbox applies them once.
func TestLostPublishAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1)
	tr, proxies := e.proxied(t)
	cfg := relayConfig("a")
	cfg.Transport = tr
	a := e.relay(t, ctx, cfg)
	e.write(t, 2, 1)
	e.waitPublished(t)
	// The payload is in the produce request's record batch (no
	// compression): the proxy that forwards it loses the broker's answer.
	lost := "lost-answer-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	for _, px := range proxies {
		px.LoseReply([]byte(lost))
	}
	e.writeEvent(t, outbox.Event{Key: "entity-0", Payload: []byte(lost)})
	e.write(t, 2, 3)
	e.waitPublished(t)
	var answers int64
	for _, px := range proxies {
		answers += px.Stats().LostReplies
	}
	if answers != 1 {
		t.Fatalf("the proxies lost %d answers, want 1", answers)
	}
	copies := e.expectCopies(t)
	t.Logf("%d copies; a %+v", copies, a.Stats())
	if s := a.Stats(); s.Failed == 0 || s.Uncertain == 0 {
		t.Fatalf("the relay saw no publish of unknown outcome: %+v", s)
	}
	if err := e.consume(t, "dedupe", true).err(); err != nil {
		t.Fatal(err)
	}
	e.foil(t, false)
}

// A publish whose request is lost on the way — the brokers never get it,
// the relay times out — fails with its outcome unknown (ErrUncertain): the
// relay cannot tell it from a lost answer, and publishes the batch again.
// The events land once. Deleting the batch as if Kafka had it would lose
// them.
func TestUncertainPublishIsResent(t *testing.T) {
	t.Parallel()
	if err := checkUncertainResent(t); err != nil {
		t.Fatal(err)
	}
}

func checkUncertainResent(t *testing.T) error {
	e := newEnv(t, 1, 1)
	tr, proxies := e.proxied(t)
	tel := telemetrytest.New(t)
	cfg := relayConfig("a")
	cfg.Transport, cfg.PublishTimeout, cfg.MeterProvider = tr, 2*time.Second, tel.Meters
	a := e.relay(t, ctx, cfg)
	e.write(t, 2, 1) // the relay learns the topic's layout
	e.waitPublished(t)
	for _, px := range proxies {
		px.Set(faultproxy.Blackhole, 0)
	}
	e.write(t, 2, 3)
	waitFor(t, 60*time.Second, func() bool { return a.Stats().Uncertain > 0 || e.pending(t) == 0 })
	for _, px := range proxies {
		px.Set(faultproxy.Pass, 0)
		px.ResetConns() // the connections the lost requests left waiting
	}
	e.waitPublished(t)
	var dropped int64
	for _, px := range proxies {
		dropped += px.Stats().Dropped
	}
	s := a.Stats()
	t.Logf("a %+v; the proxies dropped %d bytes", s, dropped)
	if err := e.consume(t, "dedupe", true).err(); err != nil {
		return err
	}
	if s.Uncertain == 0 || dropped == 0 {
		t.Fatalf("no publish was lost on the way: %+v, %d bytes dropped", s, dropped)
	}
	if got := tel.Sum(t, "lockfree.outbox.failures", attribute.String(telemetry.Cause, "uncertain")); got != s.Uncertain {
		t.Errorf("uncertain failures metric %d, stats %d", got, s.Uncertain)
	}
	if n, want := e.records(t), int64(len(e.written)); n != want {
		t.Errorf("the topic holds %d records for %d events: the lost requests were written", n, want)
	}
	return nil
}

// A relay killed between its publish and its delete leaves the events in
// the outbox: the relay that takes over publishes them again, and the
// inbox applies them once.
func TestCrashBetweenPublishAndDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1)
	e.write(t, 3, 4)
	child := testproc.Start(t, "relay", "CHILD_MODE=hang-before-mark", "CHILD_NAME=child", "CHILD_PARTITIONS=1",
		"CHILD_DATABASE_URL="+e.db.URL, "CHILD_BROKERS="+e.brokers[0], "CHILD_TOPIC="+e.topic)
	child.Expect("published", 120*time.Second)
	child.Kill()
	b := e.relay(t, ctx, relayConfig("b"))
	e.waitPublished(t)
	copies := e.expectCopies(t)
	t.Logf("%d copies; b %+v", copies, b.Stats())
	if err := e.consume(t, "dedupe", true).err(); err != nil {
		t.Fatal(err)
	}
	e.foil(t, false)
}

// A restore of the database from a backup brings back events that were
// published (and deleted) since, and loses events written after the
// backup. After fence_advance, the relay publishes the restored events
// again, and the client retries its lost request, which writes its event
// again under the same ID with a new sequence: the inbox drops both kinds
// of copy, and applies the new events.
func TestRestoreRepublishes(t *testing.T) {
	t.Parallel()
	e, err := checkRestore(t)
	if err != nil {
		t.Fatal(err)
	}
	e.foil(t, false)
}

func checkRestore(t *testing.T) (*env, error) {
	e := newEnv(t, 1, 1)
	e.write(t, 3, 3)
	backup := `CREATE TABLE backup_events AS SELECT * FROM lockfree_outbox_events;
		CREATE TABLE backup_sequences AS SELECT * FROM lockfree_outbox_sequences`
	if _, err := e.db.Pool.Exec(ctx, backup); err != nil {
		t.Fatal(err)
	}
	e.relay(t, ctx, relayConfig("a"))
	e.waitPublished(t)
	lost := e.writeEvent(t, outbox.Event{Key: "entity-0", ID: "request-42", Payload: []byte("v")})
	e.waitPublished(t)
	if err := e.consume(t, "dedupe", true).err(); err != nil {
		t.Fatalf("before the restore: %v", err)
	}

	restore := `BEGIN;
		DELETE FROM lockfree_outbox_events;
		INSERT INTO lockfree_outbox_events OVERRIDING SYSTEM VALUE SELECT * FROM backup_events;
		DELETE FROM lockfree_outbox_sequences;
		INSERT INTO lockfree_outbox_sequences SELECT * FROM backup_sequences;
		COMMIT;
		SELECT lockfree_fence_advance()`
	if _, err := e.db.Pool.Exec(ctx, restore); err != nil {
		t.Fatal(err)
	}
	retried := e.writeEvent(t, outbox.Event{Key: lost.Key, ID: lost.ID, Payload: []byte("v")})
	e.writeEvent(t, outbox.Event{Key: "entity-0", ID: "request-43", Payload: []byte("v")})
	e.waitPublished(t)
	if retried.Seq <= lost.Seq {
		t.Fatalf("the retried event's sequence %d is not above the lost one's %d", retried.Seq, lost.Seq)
	}
	e.expectCopies(t)
	a := e.consume(t, "dedupe", true)
	t.Logf("after the restore: %+v", a)
	if err := a.err(); err != nil {
		return e, fmt.Errorf("after the restore: %w", err)
	}
	return e, nil
}
