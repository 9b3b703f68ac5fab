-- list_jobs, phase "scheduled", without a kind or text filter (every listing of issue 22's
-- benchmark): each lane's newest $3 rows by index scheduled_lane (lane, job_id) backwards,
-- each first run whole as in list_scheduled.sql. No CTE, no mark, no sort: without a
-- filter every row read is an answer, so the newest $3 of the queue are among the newest
-- $3 of each lane, and the caller merges the lanes' rows (listing_scheduled_lanes.rs).
-- The general statement's materialized candidates, window count, sorts and anti-join for
-- the mark cost over half its time (docs/performance.md, "The scheduled phase as index
-- walks, job args as text").
-- $1 queue, $2 cursor job id (NULL: from the newest), $3 rows per lane
SELECT s.job_id, s.first_run, s.kind,
       CASE WHEN s.first_run THEN s.args END AS args,
       CASE WHEN s.first_run THEN s.meta END AS meta, s.max_attempts, s.run_at,
       s.enqueued_at, l.priority, u.key AS unique_key,
       s.first_run AND EXISTS (SELECT 1 FROM pgferry.cancels x WHERE x.job_id = s.job_id)
           AS cancel_requested
  FROM pgferry.queues q
  JOIN pgferry.lanes l ON l.queue_id = q.queue_id
  CROSS JOIN LATERAL (
      SELECT s.job_id, s.kind, s.first_run, s.args, s.meta, s.max_attempts, s.run_at,
             s.enqueued_at
        FROM pgferry.scheduled s
       WHERE s.lane = l.lane AND ($2::bigint IS NULL OR s.job_id < $2)
         -- The same bound as an index condition (a generic plan cannot use the OR).
         AND s.job_id <= coalesce($2::bigint, 9223372036854775807)
       ORDER BY s.job_id DESC
       LIMIT $3) s
  -- The unique key a first run holds (index unique_keys_job), as jobs_detail.sql reads it.
  LEFT JOIN LATERAL (
      SELECT u.key FROM pgferry.unique_keys u
       WHERE s.first_run AND u.job_id = s.job_id LIMIT 1) u ON true
 WHERE q.name = $1
