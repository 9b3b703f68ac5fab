-- rescue, step 2 (a fresh snapshot, after rescue_lock.sql took the receipts' locks): close
-- the attempts of those receipts that have no outcome yet, retrying them (or dead-lettering
-- on the last attempt). A worker finishing at the same moment either committed before the
-- locks were granted (its outcome is seen here) or waits for them and is answered stale.
-- $1 locked receipt ids, $2 lowest, $3 highest (BRIN receipts_id range, then = ANY filter).
-- Used by both passes: receipts past their lease, and receipts of expired long leases.
-- A receipt whose completions already close as many attempts as it holds is closed
-- entirely (every writer of outcomes skips attempts closed under the receipt, so no attempt
-- is counted twice) and is dismissed here with one completions_receipt probe per partition,
-- without unnesting its attempts. Under load nearly every expired receipt is such a one:
-- unnesting them all (500 receipts of 1,000 claimed jobs: 500,000 attempts against as many
-- outcomes) made each pass run for minutes once a NOT IN over them no longer fit work_mem.
WITH live AS (
    SELECT rc.receipt_id, rc.lane, rc.job_ids, rc.attempts, rc.job_segments
      FROM pgferry.receipts rc
     WHERE rc.receipt_id BETWEEN $2 AND $3 AND rc.receipt_id = ANY ($1)
       AND rc.lease_until < now()
       AND cardinality(rc.job_ids) > (SELECT coalesce(sum(cardinality(d.job_ids)), 0)
                                        FROM pgferry.completions d
                                       WHERE d.receipt_id = rc.receipt_id)
),
exp AS (
    SELECT l.receipt_id, l.lane AS rlane, u.job_id, u.attempt, u.segment
      FROM live l, unnest(l.job_ids, l.attempts, l.job_segments) AS u(job_id, attempt, segment)
),
-- Index completions_receipt, one probe per live receipt and partition.
closed AS (
    SELECT c.receipt_id, u.job_id, u.attempt
      FROM pgferry.completions c, unnest(c.job_ids, c.attempts) AS u(job_id, attempt)
     WHERE c.receipt_id = ANY (ARRAY(SELECT l.receipt_id FROM live l))
),
-- The attempts without an outcome: an anti join (hashed, and spilling to disk rather than
-- falling back to a per-row rescan as a NOT IN subplan does when it outgrows work_mem).
unclosed AS MATERIALIZED (
    SELECT e.* FROM exp e
     WHERE NOT EXISTS (SELECT 1 FROM closed c
                        WHERE c.receipt_id = e.receipt_id AND c.job_id = e.job_id
                          AND c.attempt = e.attempt)
),
-- Per-attempt probes of ready_rows() (index ready_by_id, then ready_claim) as LATERAL ...
-- LIMIT 1 (see pgferry.complete()).
open AS (
    SELECT e.*, rd.lane, rd.max_attempts, rd.kind, rd.args, rd.meta,
           CASE WHEN e.attempt < rd.max_attempts THEN 5 ELSE 6 END::smallint AS outcome
      FROM unclosed e
      CROSS JOIN LATERAL (
          SELECT r.lane, r.max_attempts, r.kind, r.args, r.meta
            FROM pgferry.ready_rows(e.job_id) r
           WHERE r.segment = e.segment AND r.attempt = e.attempt
           LIMIT 1) rd
     -- A heartbeat extended this attempt's lease (long_leases primary key): not yet. A
     -- handed-over attempt is rescued from its long_leases row (rescue_handed.sql), never
     -- here: its outcome must not land in completions.
     WHERE NOT EXISTS (SELECT 1 FROM pgferry.long_leases ll
                        WHERE ll.job_id = e.job_id AND ll.attempt = e.attempt
                          AND (ll.lease_until >= now() OR ll.handed_over))
),
done AS (
    INSERT INTO pgferry.completions (segment, receipt_id, outcome, job_ids, attempts, errors)
    SELECT segment, receipt_id, outcome, array_agg(job_id), array_agg(attempt),
           array_agg('lease expired'::text)
      FROM open
     GROUP BY segment, receipt_id, outcome
),
again AS (
    INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
    SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
           lane, job_id, attempt + 1, max_attempts, kind, args, meta
      FROM open WHERE outcome = 5
),
-- Free the concurrency slots of limited queues (see pgferry.complete()).
freed AS (
    UPDATE pgferry.queue_running qr
       SET running = greatest(0, qr.running - d.n)
      FROM (SELECT l.queue_id, count(*)::int AS n
              FROM open o JOIN pgferry.lanes l ON l.lane = o.rlane
             WHERE EXISTS (SELECT 1 FROM pgferry.queue_running)
             GROUP BY l.queue_id) d
     WHERE qr.queue_id = d.queue_id
),
buried AS (
    INSERT INTO pgferry.dead (job_id, lane, attempt, max_attempts, kind, args, meta, error,
                              enqueued_at)
    SELECT o.job_id, o.lane, o.attempt, o.max_attempts, o.kind, o.args, o.meta, 'lease expired',
           (SELECT min(r0.enqueued_at) FROM pgferry.ready_rows(o.job_id) r0)
      FROM open o WHERE o.outcome = 6
    ON CONFLICT (job_id) DO UPDATE
       SET attempt = EXCLUDED.attempt, error = EXCLUDED.error, died_at = now()
),
-- Rescued attempts per queue, for the servers' metrics (lanes and queues are small).
per_queue AS (
    SELECT q.name, count(*) AS n
      FROM open o
      JOIN pgferry.lanes l ON l.lane = o.lane
      JOIN pgferry.queues q ON q.queue_id = l.queue_id
     GROUP BY q.name
)
SELECT (SELECT count(*) FROM exp) AS examined,
       (SELECT count(*) FROM open WHERE outcome = 5) AS retried,
       (SELECT count(*) FROM open WHERE outcome = 6) AS dead,
       (SELECT coalesce(array_agg(name ORDER BY name), '{}') FROM per_queue) AS queues,
       (SELECT coalesce(array_agg(n ORDER BY name), '{}') FROM per_queue) AS queue_counts
