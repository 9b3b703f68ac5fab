-- hand_over(segment): hands over the open attempts of a sealed segment that hold an
-- unexpired long lease; returns how many. Leader only (the rotator).
-- Statement 1 takes the receipts' locks in key order (as complete(), heartbeat() and the
-- rescuer do); statement 2, with a fresh snapshot, skips attempts closed in completions by
-- then and copies the job from its ready row, the claim from its receipt.
CREATE OR REPLACE FUNCTION pgferry.hand_over(p_segment smallint)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET jit = off
AS $fn$
DECLARE
    v_n int;
BEGIN
    PERFORM pg_advisory_xact_lock(7267, k)
       FROM (SELECT DISTINCT (ll.receipt_id & 2147483647)::int AS k
               FROM pgferry.long_leases ll
              WHERE ll.segment = p_segment AND NOT ll.handed_over AND ll.lease_until >= now()
              ORDER BY 1) s;
    UPDATE pgferry.long_leases ll
       SET handed_over = true, handed_seg = p_segment, max_attempts = r.max_attempts,
           kind = r.kind, args = r.args, meta = r.meta, enqueued_at = r.enqueued_at,
           claimed_at = rc.claimed_at, worker = coalesce(ll.worker, rc.worker),
           receipt_pos = rc.pos
      FROM pgferry.long_leases c
      CROSS JOIN LATERAL (
          SELECT r.max_attempts, r.kind, r.args, r.meta, r.enqueued_at
            FROM pgferry.ready_rows(c.job_id) r
           WHERE r.segment = p_segment AND r.attempt = c.attempt
           LIMIT 1) r
      CROSS JOIN LATERAL (
          SELECT rc.claimed_at, rc.worker, array_position(rc.job_ids, c.job_id) AS pos
            FROM pgferry.receipts rc
           WHERE rc.segment = c.rseg AND rc.lane = c.lane AND rc.receipt_id = c.receipt_id
             AND c.job_id = ANY (rc.job_ids)
           LIMIT 1) rc
     WHERE c.segment = p_segment AND NOT c.handed_over AND c.lease_until >= now()
       AND NOT EXISTS (SELECT 1
                         FROM pgferry.completions x,
                              unnest(x.job_ids, x.attempts) AS u(job_id, attempt)
                        WHERE x.segment = p_segment AND x.receipt_id = c.receipt_id
                          AND u.job_id = c.job_id AND u.attempt = c.attempt)
       AND ll.job_id = c.job_id AND ll.attempt = c.attempt AND NOT ll.handed_over;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$fn$;
