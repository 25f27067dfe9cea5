package accounts

import (
	"context"
	"testing"

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
