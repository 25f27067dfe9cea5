package fencedlock

import "github.com/lockfree-go/lockfree/migrate"

// AcquireSQL is the acquire statement of a store on tables n, for the
// benchmark that times it on the server.
func AcquireSQL(n migrate.Names) string { return renderStatements(n).acquire }
