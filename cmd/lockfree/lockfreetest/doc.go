// Package lockfreetest puts your own code under the proof lockfree's lab
// gives its own: your operation runs in worker processes against a real
// PostgreSQL, the lab stops, kills or cuts off a worker at the points you
// mark, and your invariants (or a porcupine model) are checked on the
// recorded history and the state the run left.
//
// Mark the points in your code with the library's
// github.com/lockfree-go/lockfree/lockfreetest.Point, which costs nothing
// outside a run; this package (the lab's module) is for your tests:
//
//	// production code
//	qty, err := read(ctx, db, sku)
//	lockfreetest.Point(ctx, "before-write") // github.com/lockfree-go/lockfree/lockfreetest
//	err = write(ctx, db, sku, qty-1)
//
//	// a test
//	func TestSell(t *testing.T) {
//		rep := lockfreetest.Run(t, lockfreetest.Test[struct{}, bool]{
//			Lease:  ttl, // the lease your lock relies on: a pause outlasts it
//			Faults: []lockfreetest.Fault{lockfreetest.Pause},
//			Init:   createStock, // tables and rows, once per run
//			Op: func(ctx context.Context, w *lockfreetest.Worker, sku string, _ struct{}) (bool, error) {
//				return sell(ctx, w.DB, sku)
//			},
//			Check: func(ctx context.Context, db *pgxpool.Pool, h lockfreetest.History[struct{}, bool]) error {
//				return stockMatchesSales(ctx, db, h) // nil when it holds
//			},
//		})
//		if len(rep.Violations) > 0 {
//			t.Fatalf("%s: %v", rep.Summary(), rep.Violations)
//		}
//	}
//
// # How a run works
//
// Run re-executes the test binary as Test.Workers workers (4): each re-runs
// the calling test up to its Run, which then serves as a worker. Keep what
// comes before Run cheap, and give each Run a test of its own (t.Run). Each
// worker runs Op on keys drawn from Test.Keys (and on the key of a worker a
// fault stopped: the taker), through a proxy of its own to PostgreSQL, for
// Test.Duration. A fault that stops a worker (pause, stall, crash, isolate,
// delay) arms it at the next Point its operation reaches. Pause holds it
// past Test.Lease, sends another worker to the key, waits until that one
// served it, and lets the first go on: the stale write of a GC pause.
//
// Every operation is recorded: its input, its output, and its outcome —
// OK, Fail (certainly nothing applied: one of Test.Refusals) or Unknown (a
// lost answer; it may have applied). Check sees them all with the final
// state; Model checks each key's linearizability. A key no worker could
// serve for longer than the lease plus an operation's time is a stall, a
// violation too. The Report lists the violations, the history, a Random
// run's schedule (its Seed replays it), and writes the timeline as HTML.
package lockfreetest
