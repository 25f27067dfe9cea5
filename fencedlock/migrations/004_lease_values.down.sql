ALTER TABLE {{locks}} DROP COLUMN value;
