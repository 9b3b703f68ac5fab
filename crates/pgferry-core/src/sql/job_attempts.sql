-- get_job: every attempt of a job in the log with its outcome, if any. Lookup path, not hot:
-- ready_rows() (index ready_by_id, then ready_claim for a fresh job's row); the outcome is found in the attempt's own
-- completions partition by array containment (completions hold one row per receipt batch,
-- so a segment has about jobs/batch rows to filter).
-- $1 job id
SELECT r.attempt, r.segment, r.lane, r.xid::text, r.seq, r.kind, r.args, r.meta, r.max_attempts,
       r.enqueued_at, c.outcome, c.error, c.duration_ms, c.finished_at, c.receipt_id,
       q.name AS queue, l.priority
  FROM pgferry.ready_rows($1) r
  JOIN pgferry.lanes l ON l.lane = r.lane
  JOIN pgferry.queues q ON q.queue_id = l.queue_id
  LEFT JOIN LATERAL (
      SELECT c.outcome, c.receipt_id, c.finished_at, c.errors[u.i] AS error,
             c.durations[u.i] AS duration_ms
        FROM pgferry.completions c,
             unnest(c.job_ids, c.attempts) WITH ORDINALITY AS u(job_id, attempt, i)
       WHERE c.segment = r.segment AND c.job_ids @> ARRAY[r.job_id]
         AND u.job_id = r.job_id AND u.attempt = r.attempt
       LIMIT 1) c ON true
 ORDER BY r.attempt
