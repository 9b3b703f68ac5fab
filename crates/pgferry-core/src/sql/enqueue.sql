-- enqueue: one statement per batch, whatever its size.
-- $1 lanes int[], $2 kinds text[], $3 args jsonb[], $4 metas jsonb[], $5 max_attempts int[]
-- The current segment is an uncorrelated subquery: one InitPlan per statement, so a batch
-- never straddles two segments. Plan: Insert on ready -> ProjectSet/Function Scan (unnest);
-- no index is read. ORDER BY ord keeps RETURNING in input order.
INSERT INTO pgferry.ready (segment, lane, job_id, attempt, max_attempts, kind, args, meta)
SELECT (SELECT s.segment FROM pgferry.segments s WHERE s.state = 'current'),
       u.lane, nextval('pgferry.job_id_seq'), 1, u.max_attempts, u.kind, u.args, u.meta
  FROM unnest($1::int[], $2::text[], $3::jsonb[], $4::jsonb[], $5::int[])
       WITH ORDINALITY AS u(lane, kind, args, meta, max_attempts, ord)
 ORDER BY u.ord
RETURNING job_id
