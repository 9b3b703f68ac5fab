-- heartbeat(...): extends the leases of attempts a worker still holds; returns, per input
-- position, whether the attempt is still held (open under its receipt) and whether it was
-- cancelled. Takes the receipts' locks first, like complete() and the rescuer, so a rescue
-- either sees the new lease or has closed the attempt before the heartbeat looks (then
-- `held` is false). For handed-over attempts (ADR 0008) the long_leases row is the
-- authority (their receipt may be gone): held while it names the attempt and receipt and has
-- no outcome. The log path never answers for a handed-over attempt (it would extend a
-- finished one whose receipt is still there).
-- Arguments: aligned arrays of job ids, attempts, job segments, receipt ids, lanes, receipt
-- segments; the new lease in ms; the worker.
CREATE OR REPLACE FUNCTION pgferry.heartbeat(
    p_job_ids bigint[], p_attempts int[], p_segments smallint[], p_receipts bigint[],
    p_lanes int[], p_rsegs smallint[], p_lease_ms int, p_worker text)
RETURNS TABLE (ord bigint, held boolean, cancelled boolean, lease_until timestamptz)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_handed boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(7267, k)
       FROM (SELECT DISTINCT (r & 2147483647)::int AS k FROM unnest(p_receipts) r ORDER BY 1) s;
    v_handed := EXISTS (SELECT 1 FROM pgferry.long_leases ll WHERE ll.handed_over);

    RETURN QUERY
    WITH o AS (
        SELECT *
          FROM unnest(p_job_ids, p_attempts, p_segments, p_receipts, p_lanes, p_rsegs)
               WITH ORDINALITY AS o(job_id, attempt, segment, receipt_id, lane, rseg, ord)
    ),
    held AS (
        SELECT k.receipt_id, u.job_id, u.attempt, u.segment
          FROM (SELECT DISTINCT o.receipt_id, o.lane, o.rseg FROM o) k
          CROSS JOIN LATERAL (
              SELECT rc.job_ids, rc.attempts, rc.job_segments
                FROM pgferry.receipts rc
               WHERE rc.segment = k.rseg AND rc.lane = k.lane AND rc.receipt_id = k.receipt_id
               LIMIT 1) r,
          unnest(r.job_ids, r.attempts, r.job_segments) AS u(job_id, attempt, segment)
    ),
    closed AS (
        SELECT c.receipt_id, u.job_id, u.attempt
          FROM pgferry.completions c, unnest(c.job_ids, c.attempts) AS u(job_id, attempt)
         WHERE c.receipt_id = ANY (p_receipts) AND c.segment = ANY (p_segments)
    ),
    -- Handed-over attempts of these receipts (index long_leases_handed; only when any exist).
    hand AS (
        SELECT ll.receipt_id, ll.job_id, ll.attempt, ll.outcome IS NULL AS open
          FROM pgferry.long_leases ll
         WHERE v_handed AND ll.handed_over AND ll.receipt_id = ANY (p_receipts)
    ),
    live AS (
        SELECT o.*
          FROM o
         WHERE ((o.receipt_id, o.job_id, o.attempt, o.segment)
                   IN (SELECT h.receipt_id, h.job_id, h.attempt, h.segment FROM held h)
                AND (o.receipt_id, o.job_id, o.attempt)
                   NOT IN (SELECT c.receipt_id, c.job_id, c.attempt FROM closed c)
                AND (o.receipt_id, o.job_id, o.attempt)
                   NOT IN (SELECT h.receipt_id, h.job_id, h.attempt FROM hand h)
                -- Not an attempt of a freed incarnation of its segment (reuse_floor).
                AND o.receipt_id > (SELECT s.reuse_floor FROM pgferry.segments s
                                     WHERE s.segment = o.segment))
            OR (o.receipt_id, o.job_id, o.attempt)
                   IN (SELECT h.receipt_id, h.job_id, h.attempt FROM hand h WHERE h.open)
    ),
    up AS (
        INSERT INTO pgferry.long_leases (receipt_id, job_id, attempt, lane, rseg, segment,
                                         worker, lease_until)
        SELECT DISTINCT ON (l.job_id, l.attempt) l.receipt_id, l.job_id, l.attempt, l.lane,
               l.rseg, l.segment, p_worker, now() + p_lease_ms * interval '1 millisecond'
          FROM live l
        ON CONFLICT (job_id, attempt) DO UPDATE SET lease_until = EXCLUDED.lease_until,
                                                    worker = EXCLUDED.worker
         WHERE long_leases.outcome IS NULL
        RETURNING job_id, attempt
    )
    SELECT o.ord,
           (o.job_id, o.attempt) IN (SELECT up.job_id, up.attempt FROM up),
           EXISTS (SELECT 1 FROM pgferry.cancels c WHERE c.job_id = o.job_id),
           now() + p_lease_ms * interval '1 millisecond'
      FROM o
     ORDER BY o.ord;
END
$fn$;
