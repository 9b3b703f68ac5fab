-- rescue of handed-over attempts (ADR 0008): their lease lapsed without an outcome. The
-- long_leases row is their authority: the outcome lands there (lease_expired, 5 retried or
-- 6 dead on the last attempt), first outcome wins (a worker's complete() updating the same
-- row waits for it and then finds it closed, or closed it first and is not matched here).
-- Retries and dead letters come from the job data the hand-over carried.
-- Index long_leases_handed_open. Same columns as rescue.sql.
-- $1 max attempts
WITH due AS (
    SELECT ll.job_id, ll.attempt
      FROM pgferry.long_leases ll
     WHERE ll.handed_over AND ll.outcome IS NULL AND ll.lease_until < now()
     LIMIT $1
),
open AS (
    UPDATE pgferry.long_leases ll
       SET outcome = CASE WHEN ll.attempt < ll.max_attempts THEN 5 ELSE 6 END,
           error = 'lease expired', finished_at = now()
      FROM due d
     WHERE ll.job_id = d.job_id AND ll.attempt = d.attempt
       AND ll.outcome IS NULL AND ll.lease_until < now()
    RETURNING ll.job_id, ll.attempt, ll.lane, ll.max_attempts, ll.kind, ll.args, ll.meta,
              ll.outcome, ll.enqueued_at
),
again AS (
    INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
    SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
           lane, job_id, attempt + 1, max_attempts, kind, args, meta
      FROM open WHERE outcome = 5
),
freed AS (
    UPDATE pgferry.queue_running qr
       SET running = greatest(0, qr.running - d.n)
      FROM (SELECT l.queue_id, count(*)::int AS n
              FROM open o JOIN pgferry.lanes l ON l.lane = o.lane
             WHERE EXISTS (SELECT 1 FROM pgferry.queue_running)
             GROUP BY l.queue_id) d
     WHERE qr.queue_id = d.queue_id
),
buried AS (
    INSERT INTO pgferry.dead (job_id, lane, attempt, max_attempts, kind, args, meta, error,
                              enqueued_at)
    SELECT o.job_id, o.lane, o.attempt, o.max_attempts, o.kind, o.args, o.meta, 'lease expired',
           coalesce((SELECT min(r0.enqueued_at) FROM pgferry.ready_rows(o.job_id) r0), o.enqueued_at)
      FROM open o WHERE o.outcome = 6
    ON CONFLICT (job_id) DO UPDATE
       SET attempt = EXCLUDED.attempt, error = EXCLUDED.error, died_at = now()
),
per_queue AS (
    SELECT q.name, count(*) AS n
      FROM open o
      JOIN pgferry.lanes l ON l.lane = o.lane
      JOIN pgferry.queues q ON q.queue_id = l.queue_id
     GROUP BY q.name
)
SELECT (SELECT count(*) FROM due) AS examined,
       (SELECT count(*) FROM open WHERE outcome = 5) AS retried,
       (SELECT count(*) FROM open WHERE outcome = 6) AS dead,
       (SELECT coalesce(array_agg(name ORDER BY name), '{}') FROM per_queue) AS queues,
       (SELECT coalesce(array_agg(n ORDER BY name), '{}') FROM per_queue) AS queue_counts
