-- Rolls every complete minute since the watermark into rollup_1m (session-seconds per
-- combo; combo 0: seconds covered by samples, heartbeats included) and moves the
-- watermark, in one statement. Returns the rows written.
WITH s AS (
    SELECT coalesce(minute_to,
                    (SELECT date_trunc('minute', min(at), 'UTC') FROM pgferry_ash.sample),
                    date_trunc('minute', now(), 'UTC')) AS lo,
           date_trunc('minute', now(), 'UTC') AS hi
    FROM pgferry_ash.rollup_state
    FOR UPDATE
), ins AS (
    INSERT INTO pgferry_ash.rollup_1m (minute, combo, seconds)
    SELECT date_trunc('minute', x.at, 'UTC'), d.combo, sum(d.n * x.interval_ms)::float8 / 1000
    FROM s, pgferry_ash.sample x, pgferry_ash.decode(x.data) d
    WHERE x.at >= s.lo AND x.at < s.hi
    GROUP BY 1, 2
    UNION ALL
    SELECT date_trunc('minute', x.at, 'UTC'), 0, sum(x.interval_ms)::float8 / 1000
    FROM s, pgferry_ash.sample x
    WHERE x.at >= s.lo AND x.at < s.hi
    GROUP BY 1
    RETURNING 1
), upd AS (
    UPDATE pgferry_ash.rollup_state SET minute_to = s.hi FROM s WHERE s.hi > s.lo
)
SELECT count(*) AS rows FROM ins
