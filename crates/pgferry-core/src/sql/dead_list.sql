-- DLQ listing, newest first, keyset-paginated on (died_at, job_id) — no OFFSET, no count(*).
-- Index dead_died (died_at DESC, job_id DESC). Filters are optional (NULL = any).
-- $1 queue names text[] (NULL: all), $2 kind, $3 error substring, $4 cursor died_at,
-- $5 cursor job_id, $6 limit (one more than the page, to know has_more)
SELECT d.job_id, q.name AS queue, d.kind, d.args, d.meta, d.attempt, d.max_attempts, d.error, d.died_at,
       d.enqueued_at, l.priority
  FROM pgferry.dead d
  JOIN pgferry.lanes l ON l.lane = d.lane
  JOIN pgferry.queues q ON q.queue_id = l.queue_id
 WHERE ($1::text[] IS NULL OR q.name = ANY ($1))
   AND ($2::text IS NULL OR d.kind = $2)
   AND ($3::text IS NULL OR strpos(d.error, $3) > 0)
   AND ($4::timestamptz IS NULL OR (d.died_at, d.job_id) < ($4, $5::bigint))
 ORDER BY d.died_at DESC, d.job_id DESC
 LIMIT $6
