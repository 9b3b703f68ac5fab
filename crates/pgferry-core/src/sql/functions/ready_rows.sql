-- The rows of one job, in any segment: by_id rows through ready_by_id, a fresh non-anchor
-- row through its block's anchor (an anchor probe per partition, then one ready_claim
-- probe (lane, xid, seq) per anchor found). Inlined by the planner (one SELECT, STABLE, SQL).
--
-- The fresh row is read in a LATERAL subquery behind OFFSET 0, so that it is always the
-- inner side of the anchor's nested loop. As a plain join, generic plans (complete(), the
-- rescuer, the listing) drove it from the other side whenever the current segment's
-- statistics were those of an empty partition (ADR 0009; autovacuum lags a growing
-- segment): an index scan of ready_claim on `seq` alone, a non-leading column, reads every
-- partition's whole index. Seeding 10M jobs (issue 24) measured 11,500 buffers per failed
-- job at 2.3M jobs, growing with the history, against 52 this way; complete() of a batch
-- with ten failures took 0.5 s of CPU and then waited on I/O once the index outgrew
-- shared_buffers.
CREATE OR REPLACE FUNCTION pgferry.ready_rows(p_job_id bigint)
RETURNS SETOF pgferry.ready
LANGUAGE sql STABLE AS $fn$
    SELECT r.* FROM pgferry.ready r WHERE r.by_id AND r.job_id = p_job_id
    UNION ALL
    SELECT r.*
      FROM pgferry.ready a
      CROSS JOIN LATERAL (
          SELECT r.* FROM pgferry.ready r
           WHERE r.segment = a.segment AND r.lane = a.lane AND r.xid = a.xid
             AND r.seq = p_job_id AND r.job_id = p_job_id AND NOT r.by_id
          OFFSET 0) r
     WHERE a.by_id AND a.job_id = p_job_id & ~255::bigint AND p_job_id & 255 <> 0
$fn$;
