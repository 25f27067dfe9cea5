package kafkawriter_test

import (
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// guard is a check that a safety condition holds, and the mutant sites that
// break it: the default build runs each check in its own test and asserts
// that it sees no violation; the lockfree_mutants build turns the mutants on
// and asserts that it does (TestMutantsAreCaught), which proves that the
// check can fail.
type guard struct {
	name    string
	mutants []string
	check   func(t *testing.T) error
}

func guards() []guard {
	return []guard{
		{"stale advance", []string{"kafkawriter.inbox.advance.offset"}, func(t *testing.T) error {
			inbox, a := advancedInbox(t)
			return checkStaleAdvance(inbox, a)
		}},
		{"zombie advance", []string{"kafkawriter.inbox.advance.epoch"}, checkTakeover},
		{"takeover epoch", []string{"kafkawriter.inbox.claim.epoch"}, checkTakeover},
		{"paused consumer", []string{"kafkawriter.inbox.advance.offset", "kafkawriter.inbox.advance.epoch"}, checkPausedConsumer},
		{"stopped process", []string{"kafkawriter.inbox.advance.offset", "kafkawriter.inbox.advance.epoch"}, func(t *testing.T) error {
			return checkStoppedProcess(t, []string{"kafkawriter.inbox.advance.offset", "kafkawriter.inbox.advance.epoch"})
		}},
		{"fenced write", []string{"kafkawriter.fenced.write.token"}, checkPausedHolder},
		{"fenced write in the handler's batch", []string{"kafkawriter.fenced.write.token"}, checkPausedBatchHolder},
		{"fenced read stamp", []string{"kafkawriter.fenced.read.stamp"}, checkPausedHolder},
		{"applied events skipped", []string{"kafkawriter.fenced.skip.seq"}, checkSkipsApplied},
		{"paused fenced consumer", []string{"kafkawriter.fenced.write.token"}, checkPausedFencedConsumer},
		{"lost COMMIT mid-retry", []string{"kafkawriter.consumer.batch-retry.lost-commit"}, checkLostCommitMidRetry},
		{"lost skip mid-retry", []string{"kafkawriter.consumer.batch-retry.lost-commit"}, checkLostSkipMidRetry},
		{"dead letter refused", []string{"kafkawriter.deadletter.permanent"}, checkDeadLetterRefusedConsumer},
		{"dead letter refused, fenced consumer", []string{"kafkawriter.deadletter.permanent"}, checkDeadLetterRefusedFenced},
		{"event applied before, written again", []string{"kafkawriter.inbox.dedupe.event-id"}, func(t *testing.T) error {
			db, inbox, c := dedupeInbox(t)
			return checkDedupeByID(t, db, inbox, c)
		}},
		{"a producer's resend after ErrUncertain", []string{"kafkawriter.inbox.dedupe.event-id", "kafkawriter.inbox.dedupe.seq"}, checkProducerResend},
		{"older event after its ID was purged", []string{"kafkawriter.inbox.dedupe.seq"}, func(t *testing.T) error {
			db, inbox, c := dedupeInbox(t)
			return checkDedupeBySeq(t, db, inbox, c)
		}},
	}
}

// advancedInbox returns an inbox whose partition g/t/0 was claimed by a and
// advanced to 5.
func advancedInbox(t *testing.T) (*kafkawriter.Inbox, kafkawriter.Claim) {
	t.Helper()
	db := testdb.New(t, kafkawriter.Migrations()...)
	inbox, err := kafkawriter.NewInbox(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := inbox.Claim(ctx, "g", "t", 0, "a", kafka.FirstOffset)
	if err != nil {
		t.Fatal(err)
	}
	if err := inbox.Advance(ctx, a, a.Next, 5); err != nil {
		t.Fatal(err)
	}
	return inbox, a
}

// checkTakeover: b claims the partition after a; a's advance from the
// right offset must be fenced.
func checkTakeover(t *testing.T) error {
	inbox, a := advancedInbox(t)
	b, err := inbox.Claim(ctx, "g", "t", 0, "b", kafka.FirstOffset)
	if err != nil {
		t.Fatal(err)
	}
	return checkZombieAdvance(inbox, a, b)
}

// The inbox-only guards run here; the others are tests of their own.
func TestGuards(t *testing.T) {
	t.Parallel()
	for _, g := range guards()[:3] {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			if err := g.check(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}
