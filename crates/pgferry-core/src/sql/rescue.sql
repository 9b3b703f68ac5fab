-- rescue: close attempts whose receipt lease expired without an outcome, retrying them (or
-- dead-lettering on the last attempt). First outcome wins, so a worker finishing at the same
-- moment either beats the rescue or is answered stale.
-- $1 rescue mark (receipts at or below it are known closed), $2 max receipts per call.
-- Index receipts_id (receipt_id) from the mark; completions_attempt for the open check.
WITH exp AS (
    SELECT r.receipt_id, u.job_id, u.attempt, u.segment
      FROM (SELECT rc.receipt_id, rc.job_ids, rc.attempts, rc.job_segments
              FROM pgferry.receipts rc
             WHERE rc.receipt_id > $1 AND rc.lease_until < now()
             ORDER BY rc.receipt_id
             LIMIT $2) r,
           unnest(r.job_ids, r.attempts, r.job_segments) AS u(job_id, attempt, segment)
),
-- Per-attempt probes as LATERAL ... LIMIT 1 (see complete.sql): index ready_job and
-- completions_attempt in the attempt's partition, never a hash join over a partition.
open AS (
    SELECT e.*, rd.lane, rd.max_attempts, rd.kind, rd.args, rd.meta
      FROM exp e
      CROSS JOIN LATERAL (
          SELECT r.lane, r.max_attempts, r.kind, r.args, r.meta
            FROM pgferry.ready r
           WHERE r.segment = e.segment AND r.job_id = e.job_id AND r.attempt = e.attempt
           LIMIT 1) rd
      LEFT JOIN LATERAL (
          SELECT true AS closed
            FROM pgferry.completions c
           WHERE c.segment = e.segment AND c.job_id = e.job_id AND c.attempt = e.attempt
           LIMIT 1) c ON true
     WHERE c.closed IS NULL
),
done AS (
    INSERT INTO pgferry.completions (segment, job_id, attempt, receipt_id, outcome, error)
    SELECT segment, job_id, attempt, receipt_id,
           CASE WHEN attempt < max_attempts THEN 5 ELSE 6 END, 'lease expired'
      FROM open
    ON CONFLICT (segment, job_id, attempt) DO NOTHING
    RETURNING job_id, attempt, outcome
),
-- Hashed SubPlan, not a CTE-to-CTE join (see complete.sql).
won AS (
    SELECT * FROM (
        SELECT open.*, CASE WHEN attempt < max_attempts THEN 5 ELSE 6 END AS outcome,
               (open.job_id, open.attempt) IN (SELECT job_id, attempt FROM done) AS won
          FROM open) f
     WHERE f.won
),
again AS (
    INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
    SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
           lane, job_id, attempt + 1, max_attempts, kind, args, meta
      FROM won WHERE outcome = 5
),
buried AS (
    INSERT INTO pgferry.dead (job_id, lane, attempt, max_attempts, kind, args, meta, error)
    SELECT job_id, lane, attempt, max_attempts, kind, args, meta, 'lease expired'
      FROM won WHERE outcome = 6
    ON CONFLICT (job_id) DO UPDATE
       SET attempt = EXCLUDED.attempt, error = EXCLUDED.error, died_at = now()
)
SELECT (SELECT count(*) FROM exp) AS examined,
       (SELECT count(*) FROM won WHERE outcome = 5) AS retried,
       (SELECT count(*) FROM won WHERE outcome = 6) AS dead,
       (SELECT max(receipt_id) FROM exp) AS last_receipt
