-- AAS per bucket and wait type over [since, until). Every bucket appears: one with no
-- active session has a row with wait_type NULL and aas 0, and coverage (the share of the
-- bucket the sampler covered) tells an idle database (coverage 1) from a sampler that
-- was down (coverage 0). Rollups are used only when the bucket is at least as coarse.
CREATE OR REPLACE FUNCTION pgferry_ash.timeline(since timestamptz, until timestamptz,
                                                bucket interval)
RETURNS TABLE (bucket_start timestamptz, wait_type text, aas float8, coverage float8)
LANGUAGE sql STABLE
-- Row estimates through the nested set-returning functions are far too high, and JIT
-- then costs a second per call (measured: 1.37 s, 1 ms without).
SET jit = off
AS $$
    WITH l AS (
        SELECT date_bin(bucket, x.t, since) AS b, x.combo, sum(x.seconds) AS seconds
        FROM pgferry_ash.load_at(since, until, bucket) x
        GROUP BY 1, 2
    ), buckets AS (
        SELECT g AS b
        FROM generate_series(since, until - interval '1 microsecond', bucket) g
    ), cov AS (
        -- A join, not a subquery per bucket (that was O(buckets x rows): 140 ms for 60).
        SELECT buckets.b, coalesce(l.seconds, 0) AS covered
        FROM buckets
        LEFT JOIN l ON l.b = buckets.b AND l.combo = 0
    ), waits AS (
        SELECT l.b, w.type, sum(l.seconds) AS seconds
        FROM l
        JOIN pgferry_ash.combo c ON c.id = l.combo
        JOIN pgferry_ash.wait_event w ON w.id = c.wait_id
        GROUP BY 1, 2
    )
    SELECT cov.b, waits.type,
           coalesce(waits.seconds / nullif(cov.covered, 0), 0),
           least(1, cov.covered / extract(epoch FROM least(bucket, until - cov.b)))::float8
    FROM cov
    LEFT JOIN waits ON waits.b = cov.b
    ORDER BY 1, 2
$$
