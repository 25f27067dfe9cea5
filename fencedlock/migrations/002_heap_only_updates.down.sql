ALTER TABLE {{locks}} RESET (fillfactor);
CREATE INDEX IF NOT EXISTS {{bare locks_expires_at}} ON {{locks}} (expires_at);
