-- promote: move due scheduled jobs into the log, one batch per statement.
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
)
INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
       lane, job_id, attempt, max_attempts, kind, args, meta
  FROM due
