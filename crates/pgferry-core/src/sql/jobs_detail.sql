-- get_job and list_jobs: a set of jobs with every attempt in the log, its outcome, and the
-- job's rows outside the log, in one statement. Lookup path, not hot. One row per attempt
-- (ordered by job, attempt); a job never in the log (scheduled, or cancelled there) has one
-- row with a NULL attempt. The state is derived from these rows by lookup.rs.
--   - attempts: index ready_job (job_id) on every partition, per id;
--   - claimed: has the lane's cursor (newest receipt, receipts_cursor) passed the row? A
--     row is claimed when it was visible at the cursor's range start, or is in the cursor's
--     range at or before its position (ranges are consumed in order);
--   - outcomes: only of claimed attempts, by array overlap in their segments' completions
--     (one pass over each such partition for the whole set: completions hold one row per
--     receipt batch and carry no per-job index, which would cost complete() an entry per job);
--   - side rows: primary keys of scheduled, cancels, dead; results_job for the result.
-- $1 job ids
WITH ids AS (
    SELECT DISTINCT i.job_id FROM unnest($1::bigint[]) AS i(job_id)
),
-- One probe of ready_job per id and partition (a LATERAL, so that no estimate of the
-- array's size turns it into a scan of the log).
att AS MATERIALIZED (
    SELECT r.*
      FROM ids i
      CROSS JOIN LATERAL (
          SELECT r.job_id, r.attempt, r.segment, r.lane, r.xid, r.seq, r.kind, r.args, r.meta,
                 r.max_attempts, r.enqueued_at
            FROM pgferry.ready r
           WHERE r.job_id = i.job_id) r
),
cur AS MATERIALIZED (
    SELECT l.lane, rc.lo_snap, rc.hi_snap, rc.last_xid, rc.last_seq, rc.exhausted
      FROM (SELECT DISTINCT a.lane FROM att a) l
      LEFT JOIN LATERAL (
          SELECT rc.lo_snap, rc.hi_snap, rc.last_xid, rc.last_seq, rc.exhausted
            FROM pgferry.receipts rc
           WHERE rc.lane = l.lane
           ORDER BY rc.receipt_id DESC
           LIMIT 1) rc ON true
),
a2 AS MATERIALIZED (
    SELECT a.*,
           coalesce(pg_visible_in_snapshot(a.xid, c.lo_snap)
                    OR (pg_visible_in_snapshot(a.xid, c.hi_snap)
                        AND (c.exhausted OR (a.xid, a.seq) <= (c.last_xid, c.last_seq))),
                    false) AS claimed,
           a.attempt = max(a.attempt) OVER (PARTITION BY a.job_id) AS last
      FROM att a JOIN cur c ON c.lane = a.lane
),
outc AS MATERIALIZED (
    SELECT u.job_id, u.attempt, c.outcome, c.errors[u.i] AS error,
           c.durations[u.i] AS duration_ms, c.finished_at
      FROM pgferry.completions c,
           unnest(c.job_ids, c.attempts) WITH ORDINALITY AS u(job_id, attempt, i)
     WHERE c.segment = ANY (ARRAY(SELECT DISTINCT a.segment FROM a2 a WHERE a.claimed))
       AND c.job_ids && ARRAY(SELECT a.job_id FROM a2 a WHERE a.claimed)
       AND (u.job_id, u.attempt) IN (SELECT a.job_id, a.attempt FROM a2 a WHERE a.claimed)
)
SELECT k.job_id, a.attempt, a.claimed, a.last, o.outcome, o.error, o.duration_ms,
       o.finished_at, a.kind, CASE WHEN a.last THEN a.args END AS args,
       CASE WHEN a.last THEN a.meta END AS meta, a.max_attempts, a.enqueued_at,
       s.run_at, coalesce(s.kind, x.kind) AS side_kind, coalesce(s.args, x.args) AS side_args,
       coalesce(s.meta, x.meta) AS side_meta,
       coalesce(s.max_attempts, x.max_attempts) AS side_max_attempts,
       q.name AS queue, l.priority, d.attempt AS dead_attempt,
       x.job_id IS NOT NULL AS cancel_requested, res.result,
       coalesce(a.lane, s.lane, x.lane) AS lane
  FROM ids k
  LEFT JOIN a2 a ON a.job_id = k.job_id
  LEFT JOIN outc o ON o.job_id = a.job_id AND o.attempt = a.attempt
  LEFT JOIN pgferry.scheduled s ON s.job_id = k.job_id
  LEFT JOIN pgferry.cancels x ON x.job_id = k.job_id
  LEFT JOIN pgferry.dead d ON d.job_id = k.job_id
  LEFT JOIN pgferry.lanes l ON l.lane = coalesce(a.lane, s.lane, x.lane)
  LEFT JOIN pgferry.queues q ON q.queue_id = l.queue_id
  LEFT JOIN LATERAL (
      SELECT r.result FROM pgferry.results r
       WHERE a.last AND o.outcome = 1 AND r.job_id = a.job_id AND r.attempt = a.attempt
       LIMIT 1) res ON true
 ORDER BY k.job_id, a.attempt
