-- claim from a queue with a concurrency limit; see pgferry.claim_limited() in
-- sql/functions/claim_limited.sql. $1 queue id, $2 limit, $3 lanes in claim order,
-- $4 max jobs, $5 worker, $6 lease ms, $7 commit asynchronously (as in claim.sql, ADR 0019).
WITH commit_mode AS MATERIALIZED (
    SELECT set_config('synchronous_commit',
                      CASE WHEN $7::boolean THEN 'off'
                           ELSE current_setting('synchronous_commit') END,
                      true) AS mode
)
SELECT c.receipt_id, c.job_id, c.attempt, c.job_segment, c.max_attempts, c.kind, c.args,
       c.meta, c.enqueued_at, c.lane, c.receipt_segment
  FROM commit_mode, pgferry.claim_limited($1, $2, $3, $4, $5, $6) c
