-- claim from a queue with a concurrency limit; see pgferry.claim_limited() in
-- sql/functions/claim_limited.sql. $1 queue id, $2 limit, $3 lanes in claim order,
-- $4 max jobs, $5 worker, $6 lease ms
SELECT receipt_id, job_id, attempt, job_segment, max_attempts, kind, args, meta, enqueued_at,
       lane, receipt_segment
  FROM pgferry.claim_limited($1, $2, $3, $4, $5, $6)
