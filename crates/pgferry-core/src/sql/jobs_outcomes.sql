-- get_job and list_jobs, after jobs_detail.sql: the outcome of each claimed attempt (not
-- handed over), through the receipt that claimed it. Run only when a set of jobs has such
-- attempts (lookup.rs), so that pages of scheduled or pending jobs never start its scans.
--   Completions carry no per-job index, which would cost complete() an entry per job, but
--   every outcome is written under its attempt's receipt: index completions_receipt. The
--   claiming receipt is the lane's first receipt whose cursor passed the row; cursors only
--   move forward, so "has receipt r passed the row" is monotone in receipt_id within a lane:
--   a walk over the segments finds the receipt's partition, a binary search over receipt
--   ids in it the receipt (one receipts_cursor probe in one partition per step: at most one
--   per segment, then about log2(receipt ids since the reuse floor)). The cost follows the
--   set of jobs, not the history of their segments. An attempt whose receipt is gone (its
--   segment freed; a carried cursor lists no jobs) falls back to an array-overlap pass over
--   its segment's completions.
-- The arrays come through InitPlans, as in jobs_detail.sql, so the generic plan is kept.
-- $1 job ids, $2 attempts, $3 lanes, $4 segments, $5 xids (text), $6 seqs: the attempts'
-- log rows as jobs_detail.sql returned them.
WITH a2 AS MATERIALIZED (
    SELECT u.job_id, u.attempt, u.lane, u.segment, u.xid::xid8 AS xid, u.seq
      FROM unnest((SELECT $1::bigint[]), (SELECT $2::int[]), (SELECT $3::int[]),
                  (SELECT $4::smallint[]), (SELECT $5::text[]), (SELECT $6::bigint[]))
           AS u(job_id, attempt, lane, segment, xid, seq)
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
     WHERE NOT EXISTS (SELECT 1 FROM search f
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
)
SELECT o.job_id, o.attempt, o.outcome, o.error, o.duration_ms, o.finished_at, o.receipt_id
  FROM outc o
 ORDER BY o.job_id, o.attempt
