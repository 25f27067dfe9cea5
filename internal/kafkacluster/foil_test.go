//go:build lockfree_mutants

package kafkacluster_test

import "testing"

// The foil of TestZombieConsumer: with the inbox's compare-and-set on the
// stored offset and epoch removed (the mutant sites of the lockfree_mutants
// build, on in the zombie's process only), the zombie's batch commits after
// the new owner applied it: the audit must see records applied twice.
func TestZombieConsumerFoil(t *testing.T) {
	r := runZombie(t, []string{"kafkawriter.inbox.advance.offset", "kafkawriter.inbox.advance.epoch"})
	writeRow(t, "the same, inbox compare-and-set removed (foil)", r)
	if r.duplicates == 0 {
		t.Fatalf("without the compare-and-set, the zombie applied nothing twice: %s", r)
	}
	t.Logf("caught: %v", r.err())
}
