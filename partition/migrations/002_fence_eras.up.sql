-- Incarnations and epochs are minted in fence eras (the fence functions,
-- installed with these migrations), with the era the WAL timeline the
-- server writes on, read in the minting statement:
--   incarnation = fence_mint(partition_incarnation_fences)
--               = era * 2^40 + nextval(partition_incarnation_fences)
--   epoch       = fence_next(epoch) = greatest(epoch + 1, era * 2^40)
-- A promotion starts a higher timeline, so every incarnation and epoch
-- minted after a failover exceeds every one minted before it, even the ones
-- whose WAL the promoted standby never received.
--
-- Nothing goes back across this migration. Epochs need no change:
-- fence_next(epoch) is at least epoch + 1. Incarnations move to a sequence
-- that continues exactly where partition_incarnations stopped, and
-- fence_mint only adds era * 2^40 (≥ 0) to its values. The old sequence is
-- dropped rather than kept: a process still running the previous version
-- then fails to join (relation does not exist) instead of minting plain
-- incarnations. The rename takes the sequence's lock first, so no nextval
-- runs between the read of its last value and the drop.
ALTER SEQUENCE {{partition_incarnations}} RENAME TO {{bare partition_incarnations_old}};
CREATE SEQUENCE {{partition_incarnation_fences}} AS bigint NO CYCLE;
SELECT setval({{regclass partition_incarnation_fences}}, last_value, is_called) FROM {{partition_incarnations_old}};
DROP SEQUENCE {{partition_incarnations_old}};
