-- One row per sample (a heartbeat when data is empty). The slot is the period number mod 3
-- (the ring's period is read from the table, so every sampler agrees); the period number
-- and the last rotated period come back so the sampler knows when to rotate.
-- $1 interval_ms, $2 data, $3 locks (NULL when no backend waited on a lock).
WITH r AS (
    SELECT floor(extract(epoch FROM now()) / extract(epoch FROM period))::bigint AS period_no,
           rotated
    FROM pgferry_ash.ring
), ins AS (
    INSERT INTO pgferry_ash.sample (slot, interval_ms, at, data, locks)
    SELECT (r.period_no % 3)::smallint, $1::int, now(), $2::int[], $3::int[]
    FROM r
    RETURNING at
)
SELECT r.period_no, r.rotated, extract(epoch FROM ins.at)::float8 AS at_epoch
FROM r, ins
