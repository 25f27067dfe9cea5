package fencedlock

import "github.com/lockfree-go/lockfree/migrate"

// AcquireSQL and AcquireInsertSQL are the two acquire statements of a store
// on tables n, in the order Acquire sends them, and ReleaseSQL its release
// statement, for the benchmark that times them on the server.
func AcquireSQL(n migrate.Names) string { return renderStatements(n).acquire }

func AcquireInsertSQL(n migrate.Names) string { return renderStatements(n).acquireInsert }

func ReleaseSQL(n migrate.Names) string { return renderStatements(n).release }
