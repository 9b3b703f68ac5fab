-- Cancels pruner (leader): one batch of `cancels` in job id order after $1, and the
-- deletion of the requests nothing needs any more, in one statement. While `cancels` is not
-- empty every claim and heartbeat probes it per row (pgferry.claim), so finished requests
-- must not stay forever.
--   - A request for a job in the log (lane NULL) is kept while the job can still be claimed
--     or run: it goes once the job's last attempt in the log has a final outcome (completed,
--     dead, cancelled) and nothing of it waits in `scheduled`. Its history keeps that
--     outcome; get_job no longer shows `cancel_requested`.
--   - A request that removed a job from `scheduled` (lane set) is the job's only record: it
--     goes after the retention (the longest of the leader's, $3 ms, and the queues') once no
--     attempt of the job is left in the log, like the history of any finished job.
-- The last attempt: one ready_rows() probe per request; its outcome: completions of the
-- claimed ones' segments, one pass per segment (as in unique_prune.sql).
-- $1 after job id (0: from the first), $2 batch size, $3 retention ms
WITH batch AS MATERIALIZED (
    SELECT x.job_id, x.lane, x.requested_at
      FROM pgferry.cancels x
     WHERE x.job_id > $1
     ORDER BY x.job_id
     LIMIT $2
),
last AS MATERIALIZED (
    SELECT b.job_id, r.attempt, r.segment, r.lane, r.xid, r.seq
      FROM batch b
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
    SELECT u.job_id, c.outcome
      FROM pgferry.completions c,
           unnest(c.job_ids, c.attempts) AS u(job_id, attempt)
     WHERE c.segment = ANY (ARRAY(SELECT DISTINCT a.segment FROM claimed a))
       AND c.job_ids && ARRAY(SELECT a.job_id FROM claimed a)
       AND (u.job_id, u.attempt) IN (SELECT a.job_id, a.attempt FROM claimed a)
),
done AS (
    SELECT b.job_id
      FROM batch b
      LEFT JOIN last a ON a.job_id = b.job_id
      LEFT JOIN outc o ON o.job_id = b.job_id
     WHERE NOT EXISTS (SELECT 1 FROM pgferry.scheduled s WHERE s.job_id = b.job_id)
       -- Running after a hand-over (ADR 0008): its worker must still hear of the request.
       AND NOT EXISTS (SELECT 1 FROM pgferry.long_leases ll
                        WHERE ll.job_id = b.job_id AND ll.handed_over AND ll.outcome IS NULL)
       AND CASE
               WHEN b.lane IS NOT NULL
                   THEN a.job_id IS NULL
                        AND b.requested_at < now() - greatest(
                                $3::bigint,
                                (SELECT coalesce(max(q.retention_ms), 0) FROM pgferry.queues q))
                            * interval '1 millisecond'
               -- In the log: final outcome; or its rows are gone (truncated after retention).
               ELSE a.job_id IS NULL OR o.outcome IN (1, 3, 4, 6)
           END
),
gone AS (
    DELETE FROM pgferry.cancels x
     USING done d
     WHERE x.job_id = d.job_id
    RETURNING x.job_id
)
SELECT (SELECT max(b.job_id) FROM batch b) AS last_job_id, (SELECT count(*) FROM batch) AS scanned,
       (SELECT count(*) FROM gone) AS dropped
