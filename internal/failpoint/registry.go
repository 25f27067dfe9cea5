package failpoint

// Kind says what a registered site is.
type Kind int

const (
	// InjectPoint is a name passed to Inject.
	InjectPoint Kind = iota + 1
	// MutantSite is a name passed to Mutant.
	MutantSite
)

// Point is one registered name.
type Point struct {
	Name string
	Kind Kind
	// Doc says in one line where the site is and, for a mutant, what the
	// unsafe variant does.
	Doc string
}

// registry is every name used with Inject or Mutant in the module. Names are
// "<package>.<site>"; keep the list sorted by name.
var registry = []Point{
	{"atomic.cas.compare", MutantSite, "CompareAndSet (every backend, ApplyInOrder's too) sets the value whatever it holds, without comparing it with the expected one"},
	{"atomic.claim.conflict", MutantSite, "Claim (Postgres, Memory) overwrites an existing key (ON CONFLICT DO UPDATE) instead of refusing"},
	{"atomic.coalescer.in-flight", MutantSite, "a Coalescer caller whose context ends while its operation's step runs is told it did not apply (the context's error alone) instead of ErrUncertain"},
	{"atomic.coalescer.order", MutantSite, "a Coalescer hands a step's outcomes to its callers in reverse order, not each caller its own in arrival order"},
	{"atomic.decrement.floor", MutantSite, "Decrement (every backend, ApplyInOrder's too) takes the amount whatever the value, below the floor too"},
	{"atomic.decrementmany.all", MutantSite, "DecrementMany (Postgres, Memory) takes each key that has enough even when another is short: not all or nothing"},
	{"atomic.fenced.before-write", InjectPoint, "atomic.Fenced after the fenced read and the check, before the fenced write (or the claim's insert)"},
	{"atomic.fenced.in-tx", InjectPoint, "atomic.Fenced.DecrementMany's transaction, after its first key's fenced write, before the next key's and the COMMIT"},
	{"atomic.id.expired", MutantSite, "an operation or Resolve (Postgres, Memory) takes an operation ID older than Retention as live, so that a retry whose record was purged applies again"},
	{"atomic.id.fingerprint", MutantSite, "an operation ID recorded for one operation replays its outcome to another operation, key or arguments instead of answering ErrIDReused"},
	{"atomic.id.replay", MutantSite, "an operation whose ID is recorded (Postgres, Memory) applies again and writes its record over, instead of returning the recorded outcome"},
	{"atomic.id.scope", MutantSite, "a store (Postgres) replays and Resolve tells the outcome of an operation ID that another store sharing the operations table recorded, instead of answering ErrIDReused"},
	{"atomic.increment.cap", MutantSite, "Increment (every backend, ApplyInOrder's too) adds the amount whatever the value, past the cap too"},
	{"atomic.inorder.uncertain", MutantSite, "Postgres.ApplyInOrder reports a step whose reply was lost after it was sent as not applied, instead of ErrUncertain"},
	{"atomic.purge.expired", MutantSite, "Purge (Postgres, Memory) deletes operation records whatever the age of their ID, not only those older than Retention"},
	{"atomic.refusal.recheck", MutantSite, "a single-key refusal on Postgres reports the value its statement's snapshot held even when the change was refused on a newer row version (READ COMMITTED re-check), a value that would have let it apply, instead of running the statement again"},
	{"atomic.resolve.abandon", MutantSite, "Resolve (Postgres, Memory) reports an unrecorded ID abandoned without recording it, so that the operation still on its way applies afterwards"},
	{"atomic.setifgreater.compare", MutantSite, "SetIfGreater (every backend, ApplyInOrder's too) sets the value even when it is not greater"},
	{"fencedlock.acquire.clear-value", MutantSite, "a grant by Acquire keeps the previous tenure's value on the lease instead of starting without one"},
	{"fencedlock.acquire.expired", MutantSite, "Acquire grants a lock that is still held, not only a free or expired one"},
	{"fencedlock.acquire.purge-fence", MutantSite, "Postgres.Acquire mints a fresh row's token without the shared purge lock, so a purge can commit between the mint and the insert"},
	{"fencedlock.acquireall.atomic", MutantSite, "AcquireAll keeps the names it took before one it found held: not all or nothing"},
	{"fencedlock.acquireall.order", MutantSite, "AcquireAll takes the names in the caller's order, not sorted, so two overlapping sets can deadlock"},
	{"fencedlock.fence.read.stamp", MutantSite, "Fence.Read checks the token but does not raise the row's token to it"},
	{"fencedlock.fence.update.token", MutantSite, "Fence.Update writes without its token condition"},
	{"fencedlock.gate.compare", MutantSite, "Gate.Do admits a token lower than the highest it admitted"},
	{"fencedlock.locker.acquired", InjectPoint, "Locker.Do after the acquire, before fn runs with the lease"},
	{"fencedlock.locker.before-release", InjectPoint, "Locker.Do after fn returned, before the keepalive stops and the lease is released"},
	{"fencedlock.release.tenure", MutantSite, "Release frees the lock whoever holds it, not only the (holder, token) tenure"},
	{"fencedlock.renew.expired", MutantSite, "Renew extends an expired lease (revives it) if no one took over"},
	{"fencedlock.renew.tenure", MutantSite, "Renew extends the lock whoever holds it, not only the (holder, token) tenure"},
	{"fencedlock.value.tenure", MutantSite, "SetValue changes the value whoever holds the lock, not only the (holder, token) tenure"},
	{"fencedlock.verify.check", MutantSite, "Postgres.Verify accepts a lease that is no longer the current tenure"},
	{"idempotency.claim.conflict", MutantSite, "a transactional claim of a key that has a record runs the work again and writes the record over"},
	{"idempotency.claim.in-flight", MutantSite, "a claim runs beside an execution of the key in flight (transactional lock, memory wait, live lease taken over)"},
	{"idempotency.client.same-key", MutantSite, "client.Transport sends each retry of a request it keyed with a new key instead of the first"},
	{"idempotency.client.unkeyed", MutantSite, "client.Transport retries a request it did not key (a method outside Methods, no key), without a key"},
	{"idempotency.expired", MutantSite, "an expired or tombstoned key replays or is taken over instead of answering ErrExpired"},
	{"idempotency.fenced.before-write", InjectPoint, "Fenced.Do after the work, before the fenced write of its result"},
	{"idempotency.fenced.put.token", MutantSite, "PutFenced stores a result whatever token the record has seen"},
	{"idempotency.fenced.read.stamp", MutantSite, "ReadFenced checks the token but does not raise the record's token to it"},
	{"idempotency.fingerprint", MutantSite, "a key presented with another fingerprint replays or is taken over instead of answering ErrKeyReused"},
	{"idempotency.leased.before-write", InjectPoint, "Leased.Do after the work, before Complete stores its result"},
	{"idempotency.leased.complete.token", MutantSite, "Complete stores a leased attempt's result whatever the record's token"},
	{"idempotency.leased.release.token", MutantSite, "Release deletes or ends a leased record whatever its token"},
	{"idempotency.memory.before-write", InjectPoint, "Memory.Do after the work, before its result is recorded"},
	{"idempotency.middleware.lost-response", MutantSite, "Middleware releases the key of a handler that ran to the end but whose response it cannot store (over MaxResponseBody, status outside 200–599), instead of storing ProblemResponseLost in its place"},
	{"idempotency.postgres.before-write", InjectPoint, "Postgres.Do after the work, before its result is recorded (with COMMIT in its own transaction)"},
	{"kafkawriter.consumer.batch-retry", InjectPoint, "Consumer's retry of a failed batch one message at a time, before its first message's transaction"},
	{"kafkawriter.consumer.batch-retry.lost-commit", MutantSite, "Consumer goes on applying the batch it holds after a resync (a lost COMMIT answer in a batch retried one message at a time), instead of leaving the rest to the reader, sought to the stored offset: the defect, each message after it applied twice"},
	{"kafkawriter.consumer.before-write", InjectPoint, "Consumer's transaction after the handler ran, before the inbox's compare-and-set on offset and epoch"},
	{"kafkawriter.deadletter.permanent", MutantSite, "a consumer retries a dead-letter write that failed for good (a permanent Kafka error) as if the failure were transient"},
	{"kafkawriter.fenced.before-write", InjectPoint, "Fenced.Apply's transaction after the handler ran (or as it sends its first pgx.Batch, which carries the write), before the progress write fenced by the token"},
	{"kafkawriter.fenced.read.stamp", MutantSite, "Fenced.Apply's progress read checks the token but does not raise the row's token to it"},
	{"kafkawriter.fenced.skip.seq", MutantSite, "Fenced.Apply runs events whose sequence number the progress already records"},
	{"kafkawriter.fenced.write.token", MutantSite, "Fenced.Apply's progress write runs without its token condition"},
	{"kafkawriter.inbox.advance.epoch", MutantSite, "Inbox.Advance moves the offset whatever epoch (owner) is stored"},
	{"kafkawriter.inbox.advance.offset", MutantSite, "Inbox.Advance moves the offset whatever offset is stored"},
	{"kafkawriter.inbox.claim.epoch", MutantSite, "Inbox.Claim gives the new owner the old owner's epoch instead of a higher one"},
	{"kafkawriter.inbox.dedupe.event-id", MutantSite, "Inbox.Dedupe keeps a message whose event ID was applied before (or earlier in the batch)"},
	{"kafkawriter.inbox.dedupe.seq", MutantSite, "Inbox.Dedupe keeps a message whose sequence is not above the highest its entity received"},
	{"leader.term.context", MutantSite, "a leader's term context is its campaign's, not its lease's: a leader that loses its lease is not told"},
	{"occ.delete.version", MutantSite, "Delete removes the row whatever its version, not only at the version the caller names"},
	{"occ.fenced.before-write", InjectPoint, "Fenced.Update after the fenced read and mutate, before the fenced write"},
	{"occ.fenced.read.stamp", MutantSite, "the Memory twin's fenced read checks the token but does not raise the row's token to it"},
	{"occ.fenced.write.token", MutantSite, "the Memory twin's fenced write ignores a higher token on the row"},
	{"occ.id.expired", MutantSite, "a write or Resolve (Postgres, Memory) takes an operation ID older than Retention as live, so that a retry whose record was purged writes again"},
	{"occ.id.fingerprint", MutantSite, "an operation ID recorded for one write replays its outcome to another write or key instead of answering ErrIDReused"},
	{"occ.id.replay", MutantSite, "a write whose ID is recorded (Postgres, Memory) writes again and its record is written over, instead of returning the recorded version"},
	{"occ.id.scope", MutantSite, "a store (Postgres) replays and Resolve tells the outcome of an operation ID that another store sharing the operations table recorded, instead of answering ErrIDReused"},
	{"occ.insert.conflict", MutantSite, "Insert replaces an existing row instead of returning a conflict"},
	{"occ.purge.expired", MutantSite, "Purge (Postgres, Memory) deletes operation records whatever the age of their ID, not only those older than Retention"},
	{"occ.resolve.abandon", MutantSite, "Resolve (Postgres, Memory) reports an unrecorded ID abandoned without recording it, so that the write still on its way applies afterwards"},
	{"occ.update.before-write", InjectPoint, "occ.Update after the load and mutate, before the conditional write"},
	{"occ.update.version", MutantSite, "Update writes the row whatever its version, not only at the version the caller read"},
	{"outbox.relay.before-mark", InjectPoint, "Relay after a batch was published, before its delete fenced by the partition epoch"},
	{"outbox.relay.before-publish", InjectPoint, "Relay after it read a partition's batch, before it publishes it"},
	{"outbox.relay.order", MutantSite, "Relay publishes a batch newest event first, not in the order the events were written"},
	{"outbox.relay.uncertain", MutantSite, "Relay deletes a batch whose publish failed with its outcome unknown (ErrUncertain) as if Kafka had it, instead of publishing it again"},
	{"outbox.write.seq", MutantSite, "Postgres.Write reads the entity's sequence without taking its row, and leaves it: writers of one entity neither wait for each other nor get increasing sequences"},
	{"partition.check.epoch", MutantSite, "Check reports a stale epoch as current"},
	{"partition.claim.lapse", MutantSite, "Claim reads the owner's lease instead of updating its row: a heartbeat that judged it live, committed after the claim's snapshot, extends a lease the claim took for lapsed"},
	{"partition.claim.owner", MutantSite, "Claim takes a partition whose owner is live, not only one that is free, its own or expired"},
	{"partition.condition.epoch", MutantSite, "Postgres.Condition is true whatever the epoch"},
	{"partition.fenced.before-write", InjectPoint, "Fenced.Do after the lock was acquired, before fn writes with the lease"},
	{"partition.forward.slow-body", MutantSite, "Forward reads the request body on the partition's executor, not before it queues serve: a client that sends its body slowly holds every key of the partition"},
	{"partition.heartbeat.expired", MutantSite, "Heartbeat extends an expired membership lease (revives it)"},
	{"partition.join.live", MutantSite, "Join takes over a name whose lease is still live"},
	{"partition.member.before-claim", InjectPoint, "a Member step, after it read the fleet and chose the partitions to claim, before it claims them"},
	{"partition.member.before-release", InjectPoint, "a Member handoff, after the drain, before it releases the partitions it handed off"},
	{"partition.member.before-write", InjectPoint, "Member.Do on the partition executor, after the lease check, before fn writes with the epoch"},
	{"partition.member.heartbeat", InjectPoint, "a Member heartbeat, before it renews the membership lease"},
	{"partition.member.paused", MutantSite, "a Member runs calls while its membership lease is not safely held (its heartbeats are late)"},
	{"partition.member.reconcile", InjectPoint, "a Member step, before it checks its lease, reads the fleet and claims or hands off"},
	{"partition.release.epoch", MutantSite, "Release frees a partition whatever its current owner and epoch"},
	{"partition.verify.epoch", MutantSite, "Verify (Postgres and Memory) accepts a stale epoch"},
}

// Registered returns every registered name, sorted.
func Registered() []Point { return append([]Point(nil), registry...) }
