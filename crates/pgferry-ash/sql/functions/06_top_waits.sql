-- The waits (CPU included) that held most session time over [since, until).
CREATE OR REPLACE FUNCTION pgferry_ash.top_waits(since timestamptz, until timestamptz,
                                                 lim int DEFAULT 10)
RETURNS TABLE (wait_type text, wait_event text, seconds float8, aas float8,
               db_time_pct float8)
LANGUAGE sql STABLE
-- Row estimates through the nested set-returning functions are far too high, and JIT
-- then costs a second per call (measured: 1.37 s, 1 ms without).
SET jit = off
AS $$
    WITH l AS (
        SELECT x.combo, sum(x.seconds) AS seconds
        FROM pgferry_ash.load_at(since, until, interval '1 hour') x
        GROUP BY x.combo
    ), tot AS (
        SELECT coalesce(sum(seconds) FILTER (WHERE combo = 0), 0) AS covered,
               coalesce(sum(seconds) FILTER (WHERE combo <> 0), 0) AS busy
        FROM l
    )
    SELECT w.type, w.event, sum(l.seconds),
           sum(l.seconds) / nullif(tot.covered, 0),
           100 * sum(l.seconds) / nullif(tot.busy, 0)
    FROM l
    JOIN pgferry_ash.combo c ON c.id = l.combo
    JOIN pgferry_ash.wait_event w ON w.id = c.wait_id
    CROSS JOIN tot
    GROUP BY w.type, w.event, tot.covered, tot.busy
    ORDER BY 3 DESC, 1, 2
    LIMIT lim
$$
