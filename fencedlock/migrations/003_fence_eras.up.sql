-- Tokens are minted in fence eras (the fence functions, installed with these
-- migrations): fence_mint(lock_fences) = era * 2^40 + nextval(lock_fences),
-- with the era the WAL timeline the server writes on, read in the acquiring
-- statement. A promotion starts a higher timeline, so every token minted
-- after a failover exceeds every token minted before it, even the ones whose
-- WAL the promoted standby never received.
--
-- No token goes back across this migration: lock_fences continues exactly
-- where lock_tokens stopped, and fence_mint only adds era * 2^40 (≥ 0) to
-- its values, so the first token minted after the migration exceeds the
-- last one minted before it. The old sequence is dropped rather than kept:
-- a process still running the previous version then fails to acquire
-- (relation does not exist) instead of minting plain tokens, which would be
-- lower than the era tokens minted beside them. The rename takes the
-- sequence's lock first, so no nextval runs between the read of its last
-- value and the drop.
ALTER SEQUENCE {{lock_tokens}} RENAME TO {{bare lock_tokens_before_eras}};
CREATE SEQUENCE {{lock_fences}} AS bigint NO CYCLE;
SELECT setval({{regclass lock_fences}}, last_value, is_called) FROM {{lock_tokens_before_eras}};
DROP SEQUENCE {{lock_tokens_before_eras}};
