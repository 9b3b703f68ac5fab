-- Session-seconds per combo over [since, until), each row stamped with the time it
-- stands for (a sample's time, or a rollup's minute/hour). Combo 0 rows carry the
-- seconds the sampler covered (so AAS = session-seconds / covered seconds, and a gap in
-- coverage is the sampler being down, not the database being idle).
CREATE OR REPLACE FUNCTION pgferry_ash.load_at(since timestamptz, until timestamptz,
                                               finest interval DEFAULT interval '1 hour')
RETURNS TABLE (t timestamptz, combo int, seconds float8)
LANGUAGE sql STABLE AS $$
    WITH w AS MATERIALIZED (SELECT * FROM pgferry_ash.split(since, until, finest)),
    raw AS (
        SELECT x.at, x.interval_ms, x.data
        FROM w, pgferry_ash.sample x
        WHERE x.at >= since AND x.at < w.m_lo
        UNION ALL
        SELECT x.at, x.interval_ms, x.data
        FROM w, pgferry_ash.sample x
        WHERE x.at >= w.m_hi AND x.at < until
    )
    SELECT r.hour, r.combo, r.seconds
    FROM w, pgferry_ash.rollup_1h r
    WHERE r.hour >= w.h_lo AND r.hour < w.h_hi
    UNION ALL
    SELECT r.minute, r.combo, r.seconds
    FROM w, pgferry_ash.rollup_1m r
    WHERE r.minute >= w.m_lo AND r.minute < w.h_lo
    UNION ALL
    SELECT r.minute, r.combo, r.seconds
    FROM w, pgferry_ash.rollup_1m r
    WHERE r.minute >= w.h_hi AND r.minute < w.m_hi
    UNION ALL
    SELECT raw.at, d.combo, (d.n * raw.interval_ms)::float8 / 1000
    FROM raw, pgferry_ash.decode(raw.data) d
    UNION ALL
    SELECT raw.at, 0, raw.interval_ms::float8 / 1000
    FROM raw
$$
