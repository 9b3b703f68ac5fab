-- Unique-key pruner (leader): one batch of unique_keys in key order after ($1, $2), and the
-- deletion of those whose holder no longer holds them, in one statement. A holder holds its
-- key while pending, scheduled or running, or completed less than the key's period ago —
-- the rule of unique.rs (still_holds), with the state derived as get_job derives it:
--   - the holder's last attempt in the log: one ready_rows() probe per key;
--   - claimed or not: the lane's cursor (receipts_cursor), as in jobs_detail.sql;
--   - its outcome: completions of the claimed ones' segments, one pass per segment;
--   - scheduled, dead, cancels: primary keys.
-- A key whose holder is gone (history truncated, never enqueued) is released too. A holder
-- that changes state after this statement's snapshot (a dead job retried from the DLQ) may
-- lose its key; enqueue's own takeover has the same window.
-- $1 after queue (NULL: from the first key), $2 after key, $3 batch size
WITH batch AS MATERIALIZED (
    SELECT k.queue, k.key, k.job_id, k.period_ms
      FROM pgferry.unique_keys k
     WHERE $1::text IS NULL OR (k.queue, k.key) > ($1::text, $2::text)
     ORDER BY k.queue, k.key
     LIMIT $3
),
last AS MATERIALIZED (
    SELECT b.job_id, r.attempt, r.segment, r.lane, r.xid, r.seq
      FROM (SELECT DISTINCT b.job_id FROM batch b) b
      CROSS JOIN LATERAL (
          SELECT r.attempt, r.segment, r.lane, r.xid, r.seq
            FROM pgferry.ready_rows(b.job_id) r
           ORDER BY r.attempt DESC
           LIMIT 1) r
),
cur AS MATERIALIZED (
    SELECT l.lane, rc.lo_snap, rc.hi_snap, rc.last_xid, rc.last_seq, rc.exhausted
      FROM (SELECT DISTINCT a.lane FROM last a) l
      LEFT JOIN LATERAL (
          SELECT rc.lo_snap, rc.hi_snap, rc.last_xid, rc.last_seq, rc.exhausted
            FROM pgferry.receipts rc
           WHERE rc.lane = l.lane
           ORDER BY rc.receipt_id DESC
           LIMIT 1) rc ON true
),
claimed AS MATERIALIZED (
    SELECT a.*
      FROM last a JOIN cur c ON c.lane = a.lane
     WHERE coalesce(pg_visible_in_snapshot(a.xid, c.lo_snap)
                    OR (pg_visible_in_snapshot(a.xid, c.hi_snap)
                        AND (c.exhausted OR (a.xid, a.seq) <= (c.last_xid, c.last_seq))),
                    false)
),
outc AS MATERIALIZED (
    SELECT u.job_id, c.outcome, c.finished_at
      FROM pgferry.completions c,
           unnest(c.job_ids, c.attempts) AS u(job_id, attempt)
     WHERE c.segment = ANY (ARRAY(SELECT DISTINCT a.segment FROM claimed a))
       AND c.job_ids && ARRAY(SELECT a.job_id FROM claimed a)
       AND (u.job_id, u.attempt) IN (SELECT a.job_id, a.attempt FROM claimed a)
),
released AS (
    SELECT b.queue, b.key, b.job_id
      FROM batch b
      LEFT JOIN last a ON a.job_id = b.job_id
      LEFT JOIN outc o ON o.job_id = b.job_id
     WHERE NOT EXISTS (SELECT 1 FROM pgferry.scheduled s WHERE s.job_id = b.job_id)
       -- Running after a hand-over (ADR 0008): its log rows may be gone, it still holds.
       AND NOT EXISTS (SELECT 1 FROM pgferry.long_leases ll
                        WHERE ll.job_id = b.job_id AND ll.handed_over AND ll.outcome IS NULL)
       -- Completed after a hand-over: its outcome is in long_leases, not in completions, and
       -- its log rows may be gone; it holds for the key's period like any completion (the
       -- janitor keeps the row that long, long_leases_prune.sql).
       AND NOT EXISTS (SELECT 1 FROM pgferry.long_leases ll
                        WHERE ll.job_id = b.job_id AND ll.handed_over AND ll.outcome = 1
                          AND ll.finished_at + b.period_ms * interval '1 millisecond' > now())
       AND CASE
               -- Never in the log and not scheduled: cancelled there, or gone.
               WHEN a.job_id IS NULL THEN true
               WHEN o.outcome = 1 THEN b.period_ms IS NULL
                    OR o.finished_at + b.period_ms * interval '1 millisecond' <= now()
               WHEN o.outcome IN (3, 4, 6) THEN true
               -- A retry or snooze whose next attempt is not in the log: dead-lettered or
               -- cancelled since, else in flight (holds).
               WHEN o.outcome IS NOT NULL
                   THEN EXISTS (SELECT 1 FROM pgferry.dead d WHERE d.job_id = b.job_id)
                        OR EXISTS (SELECT 1 FROM pgferry.cancels x WHERE x.job_id = b.job_id)
               -- Running holds; pending holds unless cancelled (closed by the next claim).
               WHEN EXISTS (SELECT 1 FROM claimed c WHERE c.job_id = b.job_id) THEN false
               ELSE EXISTS (SELECT 1 FROM pgferry.cancels x WHERE x.job_id = b.job_id)
           END
),
gone AS (
    DELETE FROM pgferry.unique_keys k
     USING released r
     WHERE k.queue = r.queue AND k.key = r.key AND k.job_id = r.job_id
    RETURNING k.key
)
SELECT (SELECT b.queue FROM batch b ORDER BY b.queue DESC, b.key DESC LIMIT 1) AS last_queue,
       (SELECT b.key FROM batch b ORDER BY b.queue DESC, b.key DESC LIMIT 1) AS last_key,
       (SELECT count(*) FROM batch) AS scanned, (SELECT count(*) FROM gone) AS released
