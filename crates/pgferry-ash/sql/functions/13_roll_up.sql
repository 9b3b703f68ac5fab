-- Rolls every complete minute since the watermark into rollup_1m (session-seconds per combo;
-- combo 0: seconds covered by samples, heartbeats included), then every complete hour below
-- the minute watermark from rollup_1m into rollup_1h, moving both watermarks. Returns the
-- rows written. Called by the server's sampler and by take_sample() (the pg_cron mode).
CREATE OR REPLACE FUNCTION pgferry_ash.roll_up()
RETURNS bigint
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_m bigint;
    v_h bigint;
BEGIN
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
    SELECT count(*) INTO v_m FROM ins;
    WITH s AS (
        SELECT coalesce(hour_to,
                        (SELECT date_trunc('hour', min(minute), 'UTC') FROM pgferry_ash.rollup_1m),
                        date_trunc('hour', minute_to, 'UTC')) AS lo,
               date_trunc('hour', minute_to, 'UTC') AS hi
        FROM pgferry_ash.rollup_state
        WHERE minute_to IS NOT NULL
        FOR UPDATE
    ), ins AS (
        INSERT INTO pgferry_ash.rollup_1h (hour, combo, seconds)
        SELECT date_trunc('hour', m.minute, 'UTC'), m.combo, sum(m.seconds)
        FROM s, pgferry_ash.rollup_1m m
        WHERE m.minute >= s.lo AND m.minute < s.hi
        GROUP BY 1, 2
        RETURNING 1
    ), upd AS (
        UPDATE pgferry_ash.rollup_state SET hour_to = s.hi FROM s WHERE s.hi > s.lo
    )
    SELECT count(*) INTO v_h FROM ins;
    RETURN v_m + v_h;
END $$
