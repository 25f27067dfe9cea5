-- Back to plain tokens. lock_tokens starts above every token minted in an
-- era: none exceeds the highest era minted in times 2^40 plus lock_fences's
-- last value.
CREATE SEQUENCE {{lock_tokens}} AS bigint NO CYCLE;
SELECT setval({{regclass lock_tokens}},
	coalesce(pg_sequence_last_value({{regclass fence_eras}}), 0) * 1099511627776 + last_value)
	FROM {{lock_fences}};
DROP SEQUENCE {{lock_fences}};
