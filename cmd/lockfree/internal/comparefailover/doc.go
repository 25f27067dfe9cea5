// Package comparefailover runs `lockfree compare --faults failover` on a
// real PostgreSQL primary and standby (internal/replpair): the lock
// service's primary is killed with WAL its standby never received, and the
// standby promoted. It has no code outside its tests.
package comparefailover
