package fencedlock

import "github.com/lockfree-go/lockfree/migrate"

// AcquireSQL and AcquireRowSQL are the acquire statements of a store on
// tables n, for the benchmark that times them on the server: the one sent
// for a name whose row the store has not seen, and the one for a name whose
// row it has.
func AcquireSQL(n migrate.Names) string { return renderStatements(n).acquire }

func AcquireRowSQL(n migrate.Names) string { return renderStatements(n).acquireRow }

// AcquireInsertSQL is the insert-first statement for a name whose row the
// store has not seen, and ReleaseSQL the release statement.
func AcquireInsertSQL(n migrate.Names) string { return renderStatements(n).acquireInsert }

func ReleaseSQL(n migrate.Names) string { return renderStatements(n).release }

// SendFullAcquire makes p acquire names whose row it has not seen with the
// statement that inserts or takes a free row (sqlAcquire) rather than the
// insert alone, as it does once such names mostly turned out to exist.
func SendFullAcquire(p *Postgres) { p.unseen.score.Store(insertFirstBound) }

// AcquireUpdateSQL is the update alone, sent first for a name whose row the
// store has seen while such rows mostly turn out free.
func AcquireUpdateSQL(n migrate.Names) string { return renderStatements(n).acquireUpdate }

// SendHeldFirst makes p acquire names whose row it has seen with the
// statement that also answers a held row rather than the update alone, as
// it does once such rows mostly turned out held.
func SendHeldFirst(p *Postgres) { p.seen.score.Store(heldFirstBound) }
