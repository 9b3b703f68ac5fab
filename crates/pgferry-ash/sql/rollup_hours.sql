-- Rolls every complete hour below the minute watermark from rollup_1m into rollup_1h and
-- moves the hour watermark. Returns the rows written.
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
SELECT count(*) AS rows FROM ins
