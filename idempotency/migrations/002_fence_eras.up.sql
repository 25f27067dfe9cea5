-- Leased-mode tokens are minted in fence eras (the fence functions,
-- installed with these migrations): fence_mint(idempotency_fences) =
-- era * 2^40 + nextval(idempotency_fences), with the era the WAL timeline
-- the server writes on, read in the takeover statement. A promotion starts
-- a higher timeline, so every token minted after a failover exceeds every
-- token minted before it, even the ones whose WAL the promoted standby
-- never received.
--
-- No token goes back across this migration: idempotency_fences continues
-- exactly where idempotency_tokens stopped, and fence_mint only adds
-- era * 2^40 (≥ 0) to its values. The old sequence is dropped rather than
-- kept: a process still running the previous version then fails to claim
-- in leased mode (relation does not exist) instead of minting plain tokens,
-- which would be lower than the era tokens minted beside them. The rename
-- takes the sequence's lock first, so no nextval runs between the read of
-- its last value and the drop.
ALTER SEQUENCE {{idempotency_tokens}} RENAME TO {{bare idempotency_tokens_old}};
CREATE SEQUENCE {{idempotency_fences}} AS bigint NO CYCLE;
SELECT setval({{regclass idempotency_fences}}, last_value, is_called) FROM {{idempotency_tokens_old}};
DROP SEQUENCE {{idempotency_tokens_old}};
