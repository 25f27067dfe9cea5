DROP TABLE IF EXISTS {{idempotency_keys}};
DROP SEQUENCE IF EXISTS {{idempotency_tokens}};
