-- The fold of Postgres.ApplyInOrder (and so of a Coalescer's steps): the
-- operations of one step decided in order on the values of the step's keys,
-- as serial calls of the Store's methods would decide them. It reads no
-- table: the step's statement locks the rows, passes their values here, and
-- writes what this returns. A loop, not a recursive query: under a hot key
-- the step runs while the next ones wait for its rows, and this is the
-- cheapest part of it to run.
--
-- vals are the keys' values by position (NULL: the key has no row). Op i is
-- (kinds[i], kis[i] the key's position, xs[i], ys[i]); its condition and
-- new value follow its kind on the value it meets: 1 decrement (x amount,
-- y floor + amount), 2 increment (x amount, y cap - amount), 3
-- compare-and-set (x old, y next), 4 set-if-greater (x value), 5 read, 6
-- decrement many: its members are xs[i] to ys[i] of (mkis key position,
-- mxs amount, mys floor + amount), and it applies only if every member has
-- enough. A refused operation leaves vals. It returns, per operation in
-- order, whether it applied and the values after it.
CREATE FUNCTION {{atomic_apply_in_order}}(vals bigint[], kinds int2[], kis int4[], xs bigint[], ys bigint[],
	mkis int4[], mxs bigint[], mys bigint[])
RETURNS TABLE (n int, ok boolean, after bigint[])
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fold$
DECLARE
	v bigint;
	all_ok boolean;
BEGIN
	FOR i IN 1 .. coalesce(cardinality(kinds), 0) LOOP
		n := i;
		IF kinds[i] = 6 THEN
			all_ok := true;
			FOR j IN xs[i] .. ys[i] LOOP
				all_ok := all_ok AND coalesce(vals[mkis[j]] >= mys[j], false);
			END LOOP;
			FOR j IN xs[i] .. ys[i] LOOP
				IF all_ok THEN
					vals[mkis[j]] := vals[mkis[j]] - mxs[j];
				END IF;
			END LOOP;
			ok := all_ok;
		ELSE
			v := vals[kis[i]];
			ok := coalesce(CASE kinds[i]
				WHEN 1 THEN v >= ys[i]
				WHEN 2 THEN v <= ys[i]
				WHEN 3 THEN v = xs[i]
				WHEN 4 THEN xs[i] > v
				WHEN 5 THEN v IS NOT NULL END, false);
			IF ok THEN
				vals[kis[i]] := CASE kinds[i] WHEN 1 THEN v - xs[i] WHEN 2 THEN v + xs[i]
					WHEN 3 THEN ys[i] WHEN 4 THEN xs[i] ELSE v END;
			END IF;
		END IF;
		after := vals;
		RETURN NEXT;
	END LOOP;
END
$fold$;
