-- claim(lane, ...): one lane (tests, tools); the engine calls claim_lanes.
CREATE OR REPLACE FUNCTION pgferry.claim(p_lane int, p_max int, p_worker text, p_lease_ms int)
RETURNS TABLE (receipt_id bigint, job_id bigint, attempt int, job_segment smallint,
               max_attempts int, kind text, args jsonb, meta jsonb, enqueued_at timestamptz,
               receipt_segment smallint)
LANGUAGE sql VOLATILE AS $fn$
    SELECT c.receipt_id, c.job_id, c.attempt, c.job_segment, c.max_attempts, c.kind, c.args,
           c.meta, c.enqueued_at, c.receipt_segment
      FROM pgferry.claim_lanes(ARRAY[p_lane], p_max, p_worker, p_lease_ms) c
$fn$;
