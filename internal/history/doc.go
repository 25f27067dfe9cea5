// Package history records what the clients of a comparison run did, and
// checks it: each operation's call, return and answer, from every worker
// process, merged into one history and held to a sequential model of the
// scenario with the porcupine linearizability checker, or to a plain
// invariant.
package history
