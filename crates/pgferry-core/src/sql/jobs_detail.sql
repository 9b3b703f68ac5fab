-- get_job and list_jobs: a set of jobs with every attempt in the log, its outcome, and the
-- job's rows outside the log, in one statement. Lookup path, not hot. One row per attempt
-- (ordered by job, attempt); a job never in the log (scheduled, or cancelled there) has one
-- row with a NULL attempt. The state is derived from these rows by lookup.rs.
--   - attempts: ready_rows() per id (ready_by_id, then ready_claim for a fresh job's row);
--   - claimed: has the lane's cursor (newest receipt, receipts_cursor) passed the row? A
--     row is claimed when it was visible at the cursor's range start, or is in the cursor's
--     range at or before its position (ranges are consumed in order);
--   - outcomes: only of claimed attempts, through the receipt that claimed each one
--     (completions carry no per-job index, which would cost complete() an entry per job, but
--     every outcome is written under its attempt's receipt: index completions_receipt). The
--     claiming receipt is the lane's first receipt whose cursor passed the row; cursors only
--     move forward, so "has receipt r passed the row" is monotone in receipt_id within a lane:
--     a walk over the segments finds the receipt's partition, a binary search over receipt
--     ids in it the receipt (one receipts_cursor probe in one partition per step: at most
--     one per segment, then about log2(receipt ids since the reuse floor)). The cost follows the
--     page, not the history of the jobs' segments. An attempt whose receipt is gone (its
--     segment freed; a carried cursor lists no jobs) falls back to the array-overlap pass over
--     its segment's completions that this statement used to make for every attempt;
--   - side rows: primary keys of scheduled, cancels, dead; the unique key the job holds. They
--     carry the job (kind, args, times) when none of its rows is in the log any more: a job
--     scheduled, cancelled while scheduled, or dead-lettered and its segments since reused.
-- The result and the claiming receipt of each attempt come from jobs_extras.sql: kept apart,
-- this statement plans in about the time of the three it replaced (cancel needs only it).
-- $1 job ids
-- The ids come through an InitPlan, `(SELECT $1)`: custom and generic plans then estimate
-- the same rows, so after five executions the prepared statement keeps its generic plan
-- instead of re-planning this statement (~15 ms over the partitions) on every call.
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
-- The claiming receipt, in two steps, each probe reading ONE receipts partition (a probe
-- over the parent would merge every attached partition's index).
-- 1. Its segment: receipts live in the segment current at the claim, the attempt's own or a
--    later one. Walking the segments opened since the attempt's, oldest first, the first
--    whose newest receipt of the lane passed the row holds the claiming receipt (passing is
--    monotone in receipt order, and segments are current one after another).
-- 2. Its id, by binary search on receipt ids in (lo, hi] within that partition: hi passed
--    the row (it starts at that newest receipt), lo never did (the segment's reuse floor:
--    no receipt at or below it can name this incarnation of the attempt's segment). Each
--    step reads the lane's newest receipt in (lo, mid]: if it passed the row it is the new
--    hi, otherwise nothing in (lo, mid] did. Ends when no id lies strictly between.
rseg AS MATERIALIZED (
    SELECT a.job_id, a.attempt, a.lane, a.segment, a.xid, a.seq, g.reuse_floor, f.segment AS rs,
           f.receipt_id AS hi
      FROM a2 a
      JOIN pgferry.segments g ON g.segment = a.segment
      CROSS JOIN LATERAL (
          SELECT g2.segment, last.receipt_id
            FROM pgferry.segments g2
            CROSS JOIN LATERAL (
                SELECT rc.receipt_id, rc.lo_snap, rc.hi_snap, rc.exhausted, rc.last_xid,
                       rc.last_seq
                  FROM pgferry.receipts rc
                 WHERE rc.segment = g2.segment AND rc.lane = a.lane
                 ORDER BY rc.receipt_id DESC
                 LIMIT 1) last
           WHERE g2.opened_at >= g.opened_at
             AND coalesce(pg_visible_in_snapshot(a.xid, last.lo_snap)
                          OR (pg_visible_in_snapshot(a.xid, last.hi_snap)
                              AND (last.exhausted
                                   OR (a.xid, a.seq) <= (last.last_xid, last.last_seq))),
                          false)
           ORDER BY g2.opened_at
           LIMIT 1) f
     WHERE a.claimed AND NOT a.handed
),
search AS MATERIALIZED (
    WITH RECURSIVE s(job_id, attempt, lane, segment, rs, xid, seq, lo, hi) AS (
        SELECT r.job_id, r.attempt, r.lane, r.segment, r.rs, r.xid, r.seq, r.reuse_floor, r.hi
          FROM rseg r
        UNION ALL
        SELECT s.job_id, s.attempt, s.lane, s.segment, s.rs, s.xid, s.seq,
               CASE WHEN p.passed THEN s.lo ELSE (s.lo + s.hi) / 2 END,
               CASE WHEN p.passed THEN p.receipt_id ELSE s.hi END
          FROM s
          LEFT JOIN LATERAL (
              SELECT rc.receipt_id,
                     coalesce(pg_visible_in_snapshot(s.xid, rc.lo_snap)
                              OR (pg_visible_in_snapshot(s.xid, rc.hi_snap)
                                  AND (rc.exhausted
                                       OR (s.xid, s.seq) <= (rc.last_xid, rc.last_seq))),
                              false) AS passed
                FROM pgferry.receipts rc
               WHERE rc.segment = s.rs AND rc.lane = s.lane AND rc.receipt_id > s.lo
                 AND rc.receipt_id <= (s.lo + s.hi) / 2
               ORDER BY rc.receipt_id DESC
               LIMIT 1) p ON true
         WHERE s.hi - s.lo > 1
    )
    SELECT s.job_id, s.attempt, s.segment, s.hi AS receipt_id
      FROM s
      -- The receipt found lists the job: it handed the attempt out (one receipts_cursor
      -- probe each; LATERAL with LIMIT, never a hash of the receipts).
      CROSS JOIN LATERAL (
          SELECT rc.job_ids @> ARRAY[s.job_id] AS lists
            FROM pgferry.receipts rc
           WHERE rc.segment = s.rs AND rc.lane = s.lane AND rc.receipt_id = s.hi
           LIMIT 1) v
     WHERE s.hi - s.lo <= 1 AND v.lists
),
-- Claimed attempts whose receipt was not found (rare: see above).
lost AS MATERIALIZED (
    SELECT a.job_id, a.attempt, a.segment
      FROM a2 a
     WHERE a.claimed
       AND NOT EXISTS (SELECT 1 FROM search f
                        WHERE f.job_id = a.job_id AND f.attempt = a.attempt)
),
outc AS MATERIALIZED (
    SELECT u.job_id, u.attempt, c.outcome, c.errors[u.i] AS error,
           c.durations[u.i] AS duration_ms, c.finished_at, c.receipt_id
      FROM search f
      -- One completions_receipt probe per attempt, in its segment's partition (OFFSET 0
      -- keeps the LATERAL a parameterized probe, never a hash of the completions).
      CROSS JOIN LATERAL (
          SELECT c.* FROM pgferry.completions c
           WHERE c.receipt_id = f.receipt_id AND c.segment = f.segment
             -- A hand-back is not an outcome of the attempt (its newer row carries it).
             AND c.outcome <> 8
          OFFSET 0) c
      CROSS JOIN LATERAL unnest(c.job_ids, c.attempts) WITH ORDINALITY AS u(job_id, attempt, i)
     WHERE u.job_id = f.job_id AND u.attempt = f.attempt
    UNION ALL
    -- Claimed attempts without a receipt found: the overlap pass, over their segments only.
    -- The first condition has no column: a one-time filter, so that no partition is read
    -- at all when every attempt's receipt was found.
    SELECT u.job_id, u.attempt, c.outcome, c.errors[u.i] AS error,
           c.durations[u.i] AS duration_ms, c.finished_at, c.receipt_id
      FROM pgferry.completions c,
           unnest(c.job_ids, c.attempts) WITH ORDINALITY AS u(job_id, attempt, i)
     WHERE EXISTS (SELECT 1 FROM lost)
       AND c.segment = ANY (ARRAY(SELECT DISTINCT l.segment FROM lost l))
       AND c.job_ids && ARRAY(SELECT l.job_id FROM lost l)
       AND (u.job_id, u.attempt) IN (SELECT l.job_id, l.attempt FROM lost l)
       AND c.outcome <> 8
    UNION ALL
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
       coalesce(a.lane, k.s_lane, k.x_lane, k.d_lane) AS lane
  FROM side k
  LEFT JOIN a2 a ON a.job_id = k.job_id
  LEFT JOIN outc o ON o.job_id = a.job_id AND o.attempt = a.attempt
  LEFT JOIN pgferry.lanes l ON l.lane = coalesce(a.lane, k.s_lane, k.x_lane, k.d_lane)
  LEFT JOIN pgferry.queues q ON q.queue_id = l.queue_id
 ORDER BY k.job_id, a.attempt
