-- The rows of one job, in any segment: by_id rows through ready_by_id, a fresh non-anchor
-- row through its block's anchor (two index probes per partition, pruned at run time when
-- the caller also names the segment). Inlined by the planner (one SELECT, STABLE, SQL).
CREATE OR REPLACE FUNCTION pgferry.ready_rows(p_job_id bigint)
RETURNS SETOF pgferry.ready
LANGUAGE sql STABLE AS $fn$
    SELECT r.* FROM pgferry.ready r WHERE r.by_id AND r.job_id = p_job_id
    UNION ALL
    SELECT r.*
      FROM pgferry.ready a
      JOIN pgferry.ready r
        ON r.segment = a.segment AND r.lane = a.lane AND r.xid = a.xid
       AND r.seq = p_job_id AND r.job_id = p_job_id AND NOT r.by_id
     WHERE a.by_id AND a.job_id = p_job_id & ~255::bigint AND p_job_id & 255 <> 0
$fn$;
