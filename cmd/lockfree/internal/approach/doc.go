// Package approach holds the building blocks that the approaches of several
// scenarios share: the lease lock of the naive and fenced twins on the
// engine's lock service (NaiveLocker), the locks held in Redis by
// bsm/redislock and go-redsync (RedisLib), and a partition member's store
// that reports its leases and ownerships to the engine (Membership).
//
// A block uses the library's packages exactly as a user would, and reports
// what the engine's checks and fault injector need through the client's
// engine.Env. It names no scenario: each scenario's package composes these
// blocks into its approaches.
package approach
