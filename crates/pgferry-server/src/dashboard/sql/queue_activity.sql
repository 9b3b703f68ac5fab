-- A queue's latency and the workers claiming from it (the dashboard's queues page), from what
-- the engine already keeps: a read path, nothing written. Bounded by construction:
--   - oldest_pending_s: pgferry.lane_head_age over the queue's lanes: how long the next job
--     to be claimed has waited (the claim order's head; NULL when nothing waits);
--   - start wait: each receipt's claimed_at minus the enqueued_at of every attempt it handed
--     out, over the newest 10 receipts of each lane (receipts_cursor), at most 500 attempts
--     (one ready_rows() probe each): the median and the sample size. An attempt's ready row
--     is stamped when the attempt entered the log (a scheduled job: when it was enqueued,
--     so its delay counts);
--   - workers: the receipts of the queue's lanes above the rescuer's mark (the receipts that
--     can still hold open attempts; receipts_cursor range, the newest 1000 per lane), by
--     worker name: jobs handed out, the newest claim, the latest lease end.
-- $1 engine queue name
WITH lanes AS MATERIALIZED (
    SELECT l.lane
      FROM pgferry.queues q
      JOIN pgferry.lanes l ON l.queue_id = q.queue_id
     WHERE q.name = $1::text
),
recent AS MATERIALIZED (
    SELECT r.claimed_at, r.job_ids, r.attempts
      FROM lanes l
      CROSS JOIN LATERAL (
          SELECT rc.claimed_at, rc.job_ids, rc.attempts
            FROM pgferry.receipts rc
           WHERE rc.lane = l.lane AND cardinality(rc.job_ids) > 0
           ORDER BY rc.receipt_id DESC
           LIMIT 10) r
),
handed AS MATERIALIZED (
    SELECT u.job_id, u.attempt, r.claimed_at
      FROM recent r, unnest(r.job_ids, r.attempts) AS u(job_id, attempt)
     LIMIT 500
),
waits AS MATERIALIZED (
    SELECT extract(epoch FROM h.claimed_at - rr.enqueued_at)::float8 AS s
      FROM handed h
      CROSS JOIN LATERAL (
          SELECT r.enqueued_at
            FROM pgferry.ready_rows(h.job_id) r
           WHERE r.attempt = h.attempt
           ORDER BY r.xid DESC, r.seq DESC
           LIMIT 1) rr
),
workers AS MATERIALIZED (
    SELECT r.worker, sum(cardinality(r.job_ids))::bigint AS jobs,
           max(r.claimed_at) AS last_claim, max(r.lease_until) AS lease_until
      FROM lanes l
      CROSS JOIN LATERAL (
          SELECT rc.worker, rc.job_ids, rc.claimed_at, rc.lease_until
            FROM pgferry.receipts rc
           WHERE rc.lane = l.lane
             AND rc.receipt_id > coalesce((SELECT ls.rescue_mark FROM pgferry.leader_state ls), 0)
           ORDER BY rc.receipt_id DESC
           LIMIT 1000) r
     -- Cursors carried to a new segment (rotation) name no worker's claim.
     WHERE r.worker IS DISTINCT FROM 'pgferry:carry' AND cardinality(r.job_ids) > 0
     GROUP BY r.worker
)
SELECT EXISTS (SELECT 1 FROM lanes) AS exists,
       CASE WHEN EXISTS (SELECT 1 FROM lanes)
            THEN extract(epoch FROM pgferry.lane_head_age(ARRAY(SELECT l.lane FROM lanes l)))::float8
       END AS oldest_pending_s,
       (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY w.s) FROM waits w) AS start_wait_p50_s,
       (SELECT count(*) FROM waits) AS start_wait_sample,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'worker', w.worker, 'jobs', w.jobs,
                   'last_claim_unix_ms', (extract(epoch FROM w.last_claim) * 1000)::bigint,
                   'lease_until_unix_ms', (extract(epoch FROM w.lease_until) * 1000)::bigint)
                   ORDER BY w.last_claim DESC), '[]'::jsonb)
          FROM workers w) AS workers
