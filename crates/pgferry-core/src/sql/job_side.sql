-- get_job: the job's rows outside the log (primary keys of scheduled, dead, cancels). A job
-- enqueued with a future run_at exists only in `scheduled` until it is promoted (or in
-- `cancels`, if it was cancelled there).
-- $1 job id
SELECT s.run_at, coalesce(s.attempt, c.attempt), coalesce(s.kind, c.kind),
       coalesce(s.args, c.args), coalesce(s.meta, c.meta),
       coalesce(s.max_attempts, c.max_attempts), q.name, l.priority,
       d.attempt AS dead_attempt, d.error AS dead_error,
       c.job_id IS NOT NULL AS cancel_requested
  FROM (SELECT $1::bigint AS job_id) k
  LEFT JOIN pgferry.scheduled s ON s.job_id = k.job_id
  LEFT JOIN pgferry.cancels c ON c.job_id = k.job_id
  LEFT JOIN pgferry.lanes l ON l.lane = coalesce(s.lane, c.lane)
  LEFT JOIN pgferry.queues q ON q.queue_id = l.queue_id
  LEFT JOIN pgferry.dead d ON d.job_id = k.job_id
