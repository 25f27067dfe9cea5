// Package history records what the clients of a comparison run did and
// checks it: every operation's call, return and answer, from every worker
// process, merged into one history and held either to a sequential model
// of the scenario with the porcupine linearizability checker, or to a plain
// invariant. A violation comes with evidence a person can read: which
// operations, by which clients, at what times ("client 3's write of version
// 7 at t=1.820s overwrote client 5's accepted write of version 7 at
// t=1.800s: both were based on version 6"), with each operation marked by
// its part (the stale write, the write it clobbered, the witness) for a
// report to draw.
//
// # Recording
//
// Each worker process writes its operations with a Recorder: one JSON line
// when an operation is invoked — before its request leaves the process —
// and one when it completes, ok, fail or unknown. Read merges the streams
// of all the workers into one history sorted by Call. Times come from Now,
// CLOCK_MONOTONIC, which on Linux is one clock for the whole machine, so
// operations of different processes can be ordered. An operation invoked
// and never completed — its worker was killed — is read as Unknown.
//
// # Outcomes
//
// OK means the operation completed and its answer is checked. Fail means it
// certainly had no effect: its request never left the process (a refused
// connect, a closed pool, a context that had ended), or the system refused
// it (an error from the server, a conflict, a fenced write); an effect of a
// failed operation found later is a violation. Unknown means really
// unknown: a timeout or a reset after the request was sent, a session the
// server ended, a worker killed mid-operation. An Unknown operation may
// take effect at any time after its Call — a held request can land long
// after its client gave up — or never, so its Return is Inf and the checks
// allow either. Classify tells a pgx or network error's outcome, and is
// conservative: when the request may have been sent, it is Unknown.
//
// # Models
//
// Check holds each key's operations to a Model, keys being independent.
// Document is a document
// that clients edit: each edit reads the document and writes it back with
// one more edit; the document carries its version and the last edit's name
// as the writer computed them, so a lost update (an accepted edit
// overwritten) and a phantom (an edit present that was refused or never
// made) are both caught, even when they cancel out in the count. A delete
// is an edit whose state is deleted and a create an edit based on a deleted
// state, so a double create or a delete of a changed document is a lost
// update too. A final read that lists the edits names each accepted edit
// missing.
//
// CheckStoreOrder holds a store's history (Store) to a sequential
// model of its rows with porcupine, by partition (a SKU's rows: its stock,
// its case's, its price, bid and slots), each partition bounded by a
// timeout and NotChecked when it runs out; in a partition, the rows that
// operations work on together are searched together, the others apart. It
// catches what CheckStore's counts cannot: answers whose values chain but
// not in the order the operations ran.
//
// The invariant checkers need no search: CheckStore (a store whose stock
// is sold, sold in baskets and restocked, with prices, bids and holds:
// stock within its floor and capacity, the stocks found and left chained
// from the initial to the final one, stock conserved with baskets all or
// nothing, bids rising, one holder per slot) and Delivery (every
// acknowledged event applied exactly once, in order, per entity). An
// Invariant is what they share, and what a scenario's own invariant
// checker builds on (its package, cmd/lockfree/internal/scenario/<name>,
// holds the checks that belong to it alone). They take the effects found
// in the system after the run; an effect that names the operation that
// made it (Effect.By, from Call.ID) is also checked to come from an
// operation of its own key that was not refused.
//
// # Bounds
//
// Linearizability checking is NP-complete, so Check bounds it. A key's
// history is cut, by Call, into windows of at most Config.Window
// operations, each searched with a timeout (Config.Timeout), in parallel.
// A window also carries the effects of its neighbours that may land inside
// it — operations still running or uncertain when it starts, and those
// that start before its last operation returned — placed where their
// answers say, or before or after the window; a window after the first
// starts from whatever state its first answer shows. So no window boundary
// makes a linearizable history fail (a property test checks this with
// windows of two operations), but a violation whose operations straddle a
// boundary is checked in each window with the other side's answers
// unchecked, and can be missed. Uncertain operations weigh on the search:
// each stays a candidate to take effect for the rest of the key's history,
// unless Config.Settle promises how soon they land. The patterns that need
// no search — two writes based on one state, an edit nobody made — are
// found over the whole history whatever the windows.
//
// A window whose search runs out of time is not checked, and a key with
// one is NotChecked unless a violation was found in it. Findings.Figure
// writes such a check as "—", or "≥n" when it found n violations
// elsewhere: never as 0, since an unfinished check is not a pass.
//
// Findings.Visualize writes porcupine's page of a violating window — the
// operations on their clients' rows, the longest orders the search found,
// the violation's operations marked — as a debugging artifact, with the
// fault windows given as notes.
package history
