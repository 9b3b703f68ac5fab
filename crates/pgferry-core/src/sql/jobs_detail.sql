-- get_job and list_jobs: a set of jobs with every attempt in the log, whether each was
-- claimed, and the job's rows outside the log, in one statement. Lookup path. One row per
-- attempt (ordered by job, attempt); a job never in the log (scheduled, or cancelled there)
-- has one row with a NULL attempt. The state is derived from these rows by lookup.rs.
--   - attempts: ready_rows() per id (ready_by_id, then ready_claim for a fresh job's row);
--   - claimed: has the lane's cursor (newest receipt, receipts_cursor) passed the row? A
--     row is claimed when it was visible at the cursor's range start, or is in the cursor's
--     range at or before its position (ranges are consumed in order);
--   - outcomes: of attempts handed over to long_leases (ADR 0008) only, from there. The
--     outcome of any other claimed attempt comes from jobs_outcomes.sql, which lookup.rs
--     runs with this statement's claimed attempts only when there are some: a page of
--     scheduled or pending jobs neither plans nor starts the receipt search and its scans
--     of every receipts and completions partition (half of this statement's execution when
--     they were one statement, for pages that never read them; issue 22's profile);
--   - side rows: primary keys of scheduled, cancels, dead; the unique key the job holds. They
--     carry the job (kind, args, times) when none of its rows is in the log any more: a job
--     scheduled, cancelled while scheduled, or dead-lettered and its segments since reused.
-- The result and the claiming receipt of each attempt come from jobs_extras.sql.
-- $1 job ids
-- The ids come through an InitPlan, `(SELECT $1)`: custom and generic plans then estimate
-- the same rows, so after five executions the prepared statement keeps its generic plan
-- instead of re-planning this statement over the partitions on every call.
WITH ids AS (
    SELECT DISTINCT i.job_id FROM unnest((SELECT $1::bigint[])) AS i(job_id)
),
-- ready_rows() per id (a LATERAL, so that no estimate of the array's size turns it into a
-- scan of the log). An attempt handed over to long_leases (ADR 0008) is read from there,
-- whether or not its segment still holds its ready row (long_leases primary key).
-- A job handed back unstarted (outcome 8) has a second row of the same attempt, written
-- after the first: only the newest row of an attempt is the attempt.
att AS MATERIALIZED (
    SELECT r.*, false AS handed
      FROM ids i
      CROSS JOIN LATERAL (
          SELECT DISTINCT ON (r.attempt) r.job_id, r.attempt, r.segment, r.lane, r.xid, r.seq,
                 r.kind, r.args, r.meta, r.max_attempts, r.enqueued_at
            FROM pgferry.ready_rows(i.job_id) r
           ORDER BY r.attempt, r.xid DESC, r.seq DESC) r
     WHERE NOT EXISTS (SELECT 1 FROM pgferry.long_leases ll
                        WHERE ll.job_id = r.job_id AND ll.attempt = r.attempt AND ll.handed_over)
    UNION ALL
    SELECT ll.job_id, ll.attempt, ll.segment, ll.lane, NULL::xid8, NULL::bigint, ll.kind,
           ll.args, ll.meta, ll.max_attempts, ll.enqueued_at, true
      FROM ids i
      JOIN pgferry.long_leases ll ON ll.job_id = i.job_id AND ll.handed_over
),
cur AS MATERIALIZED (
    SELECT l.lane, rc.receipt_id, rc.lo_snap, rc.hi_snap, rc.last_xid, rc.last_seq,
           rc.exhausted
      FROM (SELECT DISTINCT a.lane FROM att a) l
      LEFT JOIN LATERAL (
          SELECT rc.receipt_id, rc.lo_snap, rc.hi_snap, rc.last_xid, rc.last_seq, rc.exhausted
            FROM pgferry.receipts rc
           WHERE rc.lane = l.lane
           ORDER BY rc.receipt_id DESC
           LIMIT 1) rc ON true
),
a2 AS MATERIALIZED (
    SELECT a.*,
           a.handed OR coalesce(pg_visible_in_snapshot(a.xid, c.lo_snap)
                    OR (pg_visible_in_snapshot(a.xid, c.hi_snap)
                        AND (c.exhausted OR (a.xid, a.seq) <= (c.last_xid, c.last_seq))),
                    false) AS claimed,
           a.attempt = max(a.attempt) OVER (PARTITION BY a.job_id) AS last,
           c.receipt_id AS cursor_id
      FROM att a JOIN cur c ON c.lane = a.lane
),
-- Outcomes of handed-over attempts (long_leases primary key).
outc AS MATERIALIZED (
    SELECT ll.job_id, ll.attempt, ll.outcome, ll.error, ll.duration_ms, ll.finished_at,
           ll.receipt_id
      FROM a2 a
      JOIN pgferry.long_leases ll ON ll.job_id = a.job_id AND ll.attempt = a.attempt
     WHERE a.handed AND ll.outcome IS NOT NULL
),
-- The side rows, one primary-key probe each per id (LATERAL: never a hash of a whole table).
side AS MATERIALIZED (
    SELECT k.job_id, s.run_at, s.lane AS s_lane, s.kind AS s_kind, s.args AS s_args,
           s.meta AS s_meta, s.max_attempts AS s_max, x.job_id IS NOT NULL AS cancel_requested,
           x.lane AS x_lane, x.kind AS x_kind, x.args AS x_args, x.meta AS x_meta,
           x.max_attempts AS x_max, d.attempt AS dead_attempt, u.key AS unique_key,
           coalesce(s.enqueued_at, x.enqueued_at, d.enqueued_at) AS side_enqueued_at,
           x.run_at AS cancelled_run_at, d.lane AS d_lane, d.kind AS d_kind, d.args AS d_args,
           d.meta AS d_meta, d.max_attempts AS d_max, d.error AS d_error,
           d.died_at AS d_died_at
      FROM ids k
      LEFT JOIN LATERAL (
          SELECT s.* FROM pgferry.scheduled s WHERE s.job_id = k.job_id) s ON true
      LEFT JOIN LATERAL (
          SELECT x.* FROM pgferry.cancels x WHERE x.job_id = k.job_id) x ON true
      LEFT JOIN LATERAL (
          SELECT d.* FROM pgferry.dead d WHERE d.job_id = k.job_id) d ON true
      -- The unique key the job holds (index unique_keys_job); none once released.
      LEFT JOIN LATERAL (
          SELECT u.key FROM pgferry.unique_keys u WHERE u.job_id = k.job_id LIMIT 1) u ON true
)
SELECT k.job_id, a.attempt, a.claimed, a.last, o.outcome, o.error, o.duration_ms,
       o.finished_at, a.kind, CASE WHEN a.last THEN a.args END AS args,
       CASE WHEN a.last THEN a.meta END AS meta, a.max_attempts, a.enqueued_at,
       k.run_at, coalesce(k.s_kind, k.x_kind, k.d_kind) AS side_kind,
       coalesce(k.s_args, k.x_args, k.d_args) AS side_args,
       coalesce(k.s_meta, k.x_meta, k.d_meta) AS side_meta,
       coalesce(k.s_max, k.x_max, k.d_max) AS side_max_attempts,
       k.side_enqueued_at, k.cancelled_run_at, k.d_error, k.d_died_at,
       q.name AS queue, l.priority, k.dead_attempt, k.cancel_requested, o.receipt_id,
       k.unique_key,
       coalesce(a.lane, k.s_lane, k.x_lane, k.d_lane) AS lane,
       -- For jobs_outcomes.sql: where the attempt's row is in the log.
       a.handed, a.segment, a.xid::text AS xid, a.seq
  FROM side k
  LEFT JOIN a2 a ON a.job_id = k.job_id
  LEFT JOIN outc o ON o.job_id = a.job_id AND o.attempt = a.attempt
  LEFT JOIN pgferry.lanes l ON l.lane = coalesce(a.lane, k.s_lane, k.x_lane, k.d_lane)
  LEFT JOIN pgferry.queues q ON q.queue_id = l.queue_id
 ORDER BY k.job_id, a.attempt
