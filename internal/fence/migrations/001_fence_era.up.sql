-- Fences that survive a failover. Every fence — a token from a sequence, an
-- epoch kept in a row — is minted in an era and is at least era * 2^40. The
-- era is the WAL timeline the server writes on, read in the minting
-- statement, plus an offset that only grows. A promotion starts a higher
-- timeline, so what the promoted server mints exceeds what the old primary
-- minted, even the values whose WAL never reached it.

-- Two numbers, each kept in a sequence: setval takes no row lock and is not
-- undone by a rollback, so recording a new era costs the minting transaction
-- nothing, and pg_sequence_last_value (what the pg_sequences view reads)
-- reads one without a query: 0.3 µs where a SELECT from a table costs 5.
-- Both only grow.
--
-- fence_offset is added to the timeline: 0 until fence_advance raises it,
-- after a failover that creates no timeline (a restore or an upgrade onto a
-- new cluster, whose timeline starts again at 1).
CREATE SEQUENCE {{fence_offset}} AS bigint MINVALUE 0 START 0 NO CYCLE;
-- fence_eras is the highest era minted in so far: an era below it means the
-- timeline went back.
CREATE SEQUENCE {{fence_eras}} AS bigint MINVALUE 0 START 0 NO CYCLE;

-- fence_era returns the era to mint in now. It fails with SQLSTATE 55000
-- when the era is below one already minted in (the database was restored or
-- upgraded onto a cluster with a lower timeline: every fence minted now
-- could be lower than one handed out before), with 25006 on a standby (as
-- nextval would), and with 22003 from era 2^23 on.
CREATE FUNCTION {{fence_era}}() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	tl   bigint;
	era  bigint;
	seen bigint := coalesce(pg_sequence_last_value({{regclass fence_eras}}), 0);
BEGIN
	IF pg_is_in_recovery() THEN
		RAISE EXCEPTION 'lockfree: cannot mint a fence on a standby' USING ERRCODE = '25006';
	END IF;
	-- The timeline of the WAL file being written: it changes the moment a
	-- promotion ends, unlike pg_control_checkpoint(), which lags until the
	-- next checkpoint ends.
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

-- fence_mint replaces nextval(seq) for a token: era * 2^40 + nextval(seq).
-- The sequence is never restarted; a token minted after a promotion exceeds
-- every token of the old timeline as long as the old primary handed out
-- fewer than 2^40 values that the promoted standby never received. Past
-- 2^63 - 1 the multiplication or the addition fails; it never wraps.
CREATE FUNCTION {{fence_mint}}(seq regclass) RETURNS bigint LANGUAGE sql VOLATILE AS $$
	SELECT {{fence_era}}() * 1099511627776 + nextval(seq)
$$;

-- fence_next replaces prev + 1 for an epoch kept in a row: the row's next
-- epoch, at least this era's first, era * 2^40. A row whose epoch is already
-- past this era (2^40 bumps in one era, or a timeline that went back
-- unnoticed) makes it fail with SQLSTATE 55000 rather than go back. A NULL
-- prev gives the era's first epoch.
CREATE FUNCTION {{fence_next}}(prev bigint) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	era_start bigint := {{fence_era}}() * 1099511627776;
BEGIN
	IF prev >= era_start + 1099511627775 THEN
		RAISE EXCEPTION 'lockfree: epoch % is past the fence era that starts at %', prev, era_start
			USING ERRCODE = '55000', HINT = 'Run SELECT {{raw fence_advance}}() once every server of the old cluster is gone.';
	END IF;
	RETURN greatest(prev + 1, era_start);
END
$$;

-- fence_advance moves fences on to a new era, above every era minted in
-- here and above at_least: after a failover that creates no timeline. Run
-- it on the new primary once every server of the old cluster is gone; pass
-- the old cluster's last era (SELECT fence_era() there) when the restored
-- data may predate it. It returns the new era.
CREATE FUNCTION {{fence_advance}}(at_least bigint DEFAULT 0) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
	tl  bigint := ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint;
	era bigint;
BEGIN
	-- One advance at a time: two would compute from the same numbers.
	PERFORM pg_advisory_xact_lock({{regclass fence_offset}}::regclass::oid::bigint);
	era := greatest(tl + coalesce(pg_sequence_last_value({{regclass fence_offset}}), 0),
		coalesce(pg_sequence_last_value({{regclass fence_eras}}), 0), at_least) + 1;
	IF era >= 8388608 THEN
		RAISE EXCEPTION 'lockfree: fence era % does not fit in 23 bits', era USING ERRCODE = '22003';
	END IF;
	-- The offset first: between the two, minting is in the new era already,
	-- and a failure in between leaves eras that still only grow.
	PERFORM setval({{regclass fence_offset}}, era - tl);
	PERFORM setval({{regclass fence_eras}}, era);
	RETURN era;
END
$$;
