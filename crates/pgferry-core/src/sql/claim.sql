-- claim: one statement per batch over the given lanes of a queue; see pgferry.claim_lanes()
-- and sql/functions/claim_lanes.sql for the plans of the statements inside.
-- $1 lanes in claim order, $2 max jobs, $3 worker, $4 lease ms
SELECT receipt_id, job_id, attempt, job_segment, max_attempts, kind, args, meta, enqueued_at,
       lane, receipt_segment
  FROM pgferry.claim_lanes($1, $2, $3, $4)
