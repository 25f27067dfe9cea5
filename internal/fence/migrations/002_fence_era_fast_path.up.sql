-- fence_era becomes an SQL function that PostgreSQL inlines into the
-- minting statement (through fence_mint, which is inlined too). A PL/pgSQL
-- function sets up its expressions again in every transaction, and a
-- statement that grants a lease is a transaction of its own: the call cost
-- more than the reads it makes (docs/fencedlock.md, "Benchmarks", has the
-- server's time per acquire, before and after).
--
-- The fast path returns the era read in this statement when it is the era
-- already recorded in fence_eras and the server is a primary: nothing to
-- check and nothing to record. Everything else — a standby (25006), the
-- first mint, an era above the recorded one (recorded with setval), below
-- it (55000), or past 23 bits (22003) — goes to fence_era_checked, the
-- former fence_era, unchanged. The era is still read in the minting
-- statement, every time: nothing is cached across statements.
--
-- CASE evaluates its conditions in order, so a standby never reaches
-- pg_current_wal_lsn() (which fails there with another SQLSTATE). The fast
-- path needs no 23-bit check: fence_eras only ever records an era that
-- passed it (here or in fence_advance). Between the comparison and the
-- value returned, fence_eras can only grow, to an era some session minted
-- in: the era returned is never below the one compared.
--
-- No fence goes back across this migration or its down migration: both
-- functions compute the same era from the same sequences, which neither
-- touches.
CREATE FUNCTION {{fence_era_checked}}() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	tl   bigint;
	era  bigint;
	seen bigint := coalesce(pg_sequence_last_value({{regclass fence_eras}}), 0);
BEGIN
	IF pg_is_in_recovery() THEN
		RAISE EXCEPTION 'lockfree: cannot mint a fence on a standby' USING ERRCODE = '25006';
	END IF;
	tl := ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint;
	era := tl + coalesce(pg_sequence_last_value({{regclass fence_offset}}), 0);
	IF era < seen THEN
		RAISE EXCEPTION 'lockfree: fence era % is below era %, already minted in: the database was restored or upgraded onto another cluster', era, seen
			USING ERRCODE = '55000', HINT = 'Once every server of the old cluster is gone, run SELECT {{raw fence_advance}}().';
	END IF;
	IF era >= 8388608 THEN
		RAISE EXCEPTION 'lockfree: fence era % does not fit in 23 bits', era USING ERRCODE = '22003';
	END IF;
	IF era > seen THEN
		PERFORM setval({{regclass fence_eras}}, era);
	END IF;
	RETURN era;
END
$$;

CREATE OR REPLACE FUNCTION {{fence_era}}() RETURNS bigint LANGUAGE sql VOLATILE AS $$
	SELECT CASE
		WHEN pg_is_in_recovery() THEN {{fence_era_checked}}()
		WHEN ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint
				+ coalesce(pg_sequence_last_value({{regclass fence_offset}}), 0)
			= pg_sequence_last_value({{regclass fence_eras}})
		THEN pg_sequence_last_value({{regclass fence_eras}})
		ELSE {{fence_era_checked}}()
	END
$$;
