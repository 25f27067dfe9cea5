package outbox_test

import "testing"

// guard is a check that a safety condition holds, and the mutant sites that
// break it: the default build runs each check in a test of its own and
// asserts that it sees no violation; the lockfree_mutants build turns the
// mutants on and asserts that it does (TestMutantsAreCaught), which proves
// that the check can fail.
type guard struct {
	name    string
	mutants []string
	check   func(t *testing.T) error
}

func guards() []guard {
	return []guard{
		{"writers of one entity take turns", []string{"outbox.write.seq"}, checkWritersTakeTurns},
		{"relays publish in order", []string{"outbox.relay.order"}, checkRelaysPublishInOrder},
		{"a publish of unknown outcome is resent", []string{"outbox.relay.uncertain"}, checkUncertainResent},
		{"a paused relay's late publish, the inbox's checks off",
			[]string{"kafkawriter.inbox.dedupe.event-id", "kafkawriter.inbox.dedupe.seq"},
			func(t *testing.T) error { _, err := checkLatePublish(t); return err }},
		{"a restore, the inbox's event ID check off", []string{"kafkawriter.inbox.dedupe.event-id"},
			func(t *testing.T) error { _, err := checkRestore(t); return err }},
	}
}
