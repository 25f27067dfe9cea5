-- Back to the PL/pgSQL fence_era of migration 1: the same era from the same
-- sequences, so no fence goes back.
CREATE OR REPLACE FUNCTION {{fence_era}}() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
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
DROP FUNCTION {{fence_era_checked}}();
