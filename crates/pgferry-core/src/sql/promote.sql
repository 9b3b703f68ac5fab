-- promote: move due scheduled jobs into the log, one batch per statement, counting the move
-- in the lanes' counters in the same statement (one row per lane per batch, in lane order
-- like every counter write).
-- $1 batch size. Index scheduled_due (run_at); SKIP LOCKED lets an operator's DLQ/cancel
-- actions proceed concurrently.
WITH due AS (
    DELETE FROM pgferry.scheduled
     WHERE job_id IN (SELECT job_id FROM pgferry.scheduled
                       WHERE run_at <= now()
                       ORDER BY run_at
                       LIMIT $1
                       FOR UPDATE SKIP LOCKED)
    RETURNING job_id, lane, attempt, max_attempts, kind, args, meta
),
counted AS (
    INSERT INTO pgferry.lane_counters AS c (lane, pending, scheduled, version)
    SELECT d.lane, count(*), -count(*), 1 FROM due d GROUP BY d.lane ORDER BY d.lane
    ON CONFLICT (lane) DO UPDATE
       SET pending = c.pending + EXCLUDED.pending, scheduled = c.scheduled + EXCLUDED.scheduled,
           version = c.version + 1, updated_at = now()
)
INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
       lane, job_id, attempt, max_attempts, kind, args, meta
  FROM due
