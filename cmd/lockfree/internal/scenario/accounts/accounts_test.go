package accounts

import (
	"context"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// An append refused for a changed number is held to its claim: the next
// number was taken by an append that sent its write before the refusal
// came back.
func TestMisreportedConflicts(t *testing.T) {
	refused := func(seq int64, call, ret history.Time, follows string) history.Op {
		return history.Op{Client: 1, Seq: seq, Key: "account-0", Kind: KindAppend, Call: call, Return: ret,
			Outcome: history.Fail, Meta: map[string]string{metaFollows: follows}}
	}
	ops := []history.Op{
		{Client: 2, Seq: 1, Key: "account-0", Kind: KindAppend, Call: 10, Return: 20, Outcome: history.OK},
		{Client: 2, Seq: 2, Key: "account-0", Kind: KindAppend, Call: 25, Return: 60, Outcome: history.OK,
			Meta: map[string]string{metaWriteSent: "50"}},
		refused(1, 15, 30, "0"), // 1 taken by 2/1, called at 10: true
		refused(2, 30, 40, "1"), // 2 taken by 2/2, written only at 50: false
		refused(3, 70, 80, "2"), // 3 never taken: false
		refused(4, 70, 80, "x"), // no number: not judged
		refused(5, 70, 80, "2"), // unnoted below: refused otherwise
	}
	ops[6].Meta = nil
	log := []history.Effect{{Key: "account-0", Seq: 1, By: "2/1"}, {Key: "account-0", Seq: 2, By: "2/2"}}
	rep := &history.Findings{}
	misreportedConflicts(ops, log, rep)
	k := rep.Key("account-0")
	if k == nil || len(k.Violations) != 2 || k.Status != history.Violated {
		t.Fatalf("report %+v, want the refusals of 1/2 and 1/3", rep)
	}
	for i, id := range []string{"1/2", "1/3"} {
		if v := k.Violations[i]; v.Anomaly != misreportedConflict || len(v.Marks) != 1 || v.Marks[0].Op.ID() != id {
			t.Errorf("violation %d: %+v, want %s's", i, v, id)
		}
	}
}

// A stall a probe wrote is a violation of its account; none, none.
func TestStalls(t *testing.T) {
	db := testdb.New(t, (accounts{}).Migrations()...)
	ctx := context.Background()
	if err := (accounts{}).Setup(ctx, db.Pool, engine.Sizes{Keys: 1, Clients: 1}); err != nil {
		t.Fatal(err)
	}
	rep := &history.Findings{}
	if err := stalls(ctx, db.Pool, rep); err != nil || rep.Key("account-0") != nil {
		t.Fatalf("no stall written: %v, %+v", err, rep)
	}
	if _, err := db.Pool.Exec(ctx, sqlAccountsStall, "account-0", "member-1", 280); err != nil {
		t.Fatal(err)
	}
	if err := stalls(ctx, db.Pool, rep); err != nil {
		t.Fatal(err)
	}
	if k := rep.Key("account-0"); k == nil || len(k.Violations) != 1 || k.Violations[0].Anomaly != stalled {
		t.Fatalf("report %+v, want one stall of account-0", rep)
	}
}

// A probe's wait is held to its bound only beyond the time the worker was
// kept from running meanwhile (its ticks' lateness), and is not judged
// while its ticker has been silent for scheduleGap: a wait that a 200 ms
// pause explains is no stall; one that 20 ms of lateness leaves at 280 ms
// is.
func TestScheduleExplainsAWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var s schedule
	for ms := 0; ms <= 100; ms += 5 {
		s.tick(at(ms))
	}
	sent, lost := at(100), s.lost.Load()
	s.tick(at(305)) // paused 200 ms
	if w, judged := s.unexplained(at(310), sent, lost); !judged || w != 10*time.Millisecond {
		t.Fatalf("a 210 ms wait across a 200 ms pause: %v unexplained (judged %v), want 10ms", w, judged)
	}
	s.tick(at(310))
	sent, lost = at(310), s.lost.Load()
	for ms := 315; ms <= 380; ms += 5 {
		s.tick(at(ms))
	}
	s.tick(at(405)) // 20 ms late
	for ms := 410; ms <= 610; ms += 5 {
		s.tick(at(ms))
	}
	if w, judged := s.unexplained(at(610), sent, lost); !judged || w != 280*time.Millisecond {
		t.Fatalf("a 300 ms wait, 20 ms late ticks: %v unexplained (judged %v), want 280ms", w, judged)
	}
	if _, judged := s.unexplained(at(670), sent, lost); judged {
		t.Fatal("judged with no tick for 60 ms: a pause may be under way")
	}
}
