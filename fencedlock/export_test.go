package fencedlock

import "github.com/lockfree-go/lockfree/migrate"

// AcquireSQL and AcquireRowSQL are the acquire statements of a store on
// tables n, for the benchmark that times them on the server: the one sent
// for a name whose row the store has not seen, and the one for a name whose
// row it has.
func AcquireSQL(n migrate.Names) string { return renderStatements(n).acquire }

func AcquireRowSQL(n migrate.Names) string { return renderStatements(n).acquireRow }
