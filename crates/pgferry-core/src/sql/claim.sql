-- claim: one statement per batch over the given lanes of a queue; see pgferry.claim_lanes()
-- and sql/functions/claim_lanes.sql for the plans of the statements inside.
-- $1 lanes in claim order, $2 max jobs, $3 worker, $4 lease ms, $5 commit asynchronously.
-- With $5 the claim's implicit transaction commits with synchronous_commit = off (ADR 0019):
-- a claim acknowledges nothing to a user, a claim lost in a crash is a lease never taken,
-- and an outcome's synchronous commit flushes the WAL in order, the claim's records first.
-- Set here, in the engine's own one-statement transaction, never inside claim_lanes(): a
-- caller of the SQL functions in a transaction of its own keeps its durability. The GUC is
-- read at COMMIT, so where in the statement set_config() runs does not matter; the CTE runs
-- it once whatever the plan.
WITH commit_mode AS MATERIALIZED (
    SELECT set_config('synchronous_commit',
                      CASE WHEN $5::boolean THEN 'off'
                           ELSE current_setting('synchronous_commit') END,
                      true) AS mode
)
SELECT c.receipt_id, c.job_id, c.attempt, c.job_segment, c.max_attempts, c.kind, c.args,
       c.meta, c.enqueued_at, c.lane, c.receipt_segment
  FROM commit_mode, pgferry.claim_lanes($1, $2, $3, $4) c
