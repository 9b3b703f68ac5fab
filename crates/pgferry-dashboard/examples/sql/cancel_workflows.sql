-- Bench seeding (examples/list_timings.rs): ends every $3-th workflow instance numbered
-- $2 .. $2 + 9,999 of engine queue $1 through the engine's own cancel (pgferry.wf_cancel),
-- so that the list has ended instances (status cancelled) among the active ones. The
-- instance numbers are the correlation keys seed_workflows.sql gave ("order-<n>").
SELECT count(pgferry.wf_cancel(i.id, 'seeded as ended')) AS ended
  FROM pgferry.wf_instances i
 WHERE i.queue = $1::text
   AND i.correlation_key = ANY (ARRAY(SELECT 'order-' || n
                                        FROM generate_series($2::bigint, $2::bigint + 9999) n
                                       WHERE n % $3::bigint = 0))
