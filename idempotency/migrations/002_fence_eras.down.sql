-- Back to plain tokens. idempotency_tokens starts above every token minted
-- in an era: none exceeds the highest era minted in times 2^40 plus
-- idempotency_fences's last value.
CREATE SEQUENCE {{idempotency_tokens}} AS bigint NO CYCLE;
SELECT setval({{regclass idempotency_tokens}},
	coalesce(pg_sequence_last_value({{regclass fence_eras}}), 0) * 1099511627776 + last_value)
	FROM {{idempotency_fences}};
DROP SEQUENCE {{idempotency_fences}};
