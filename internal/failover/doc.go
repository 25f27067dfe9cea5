// Package failover tests what a PostgreSQL failover does to the fences
// lockfree mints — fencedlock tokens, partition epochs and incarnations, the
// tokens and epochs of idempotency's leased mode, the singlewriter inbox's
// epochs — on a real primary and standby (internal/replpair): the packages'
// own minting paths, which mint through the fence eras of internal/fence,
// beside the plain forms they replaced (nextval, prev + 1), which go back.
// docs/failover.md states the mechanism, its limits and the measurements.
//
// It has no code outside its tests.
package failover
