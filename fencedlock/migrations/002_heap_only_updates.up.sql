-- Acquire and release change expires_at on every cycle; an index on it
-- (used only by Purge) made every such update write index entries and
-- about twice the WAL. Without it, and with room left on each page, they
-- are heap-only (HOT) updates. Purge now scans the table instead.
-- Tokens are untouched: they keep coming from the same sequence, so no
-- token handed out after this migration is smaller than one handed out
-- before it.
DROP INDEX IF EXISTS {{locks_expires_at}};
ALTER TABLE {{locks}} SET (fillfactor = 80);
