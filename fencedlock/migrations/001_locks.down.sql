DROP TABLE {{locks}};
DROP SEQUENCE {{lock_tokens}};
