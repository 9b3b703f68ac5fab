-- Takes one running operation whose lease ran out (new, or its server died): $1 owner,
-- $2 lease in seconds. Index dashboard_ops_running.
UPDATE pgferry.dashboard_ops o
   SET owner = $1::text, lease_until = now() + make_interval(secs => $2::float8), updated_at = now()
 WHERE o.op_id = (SELECT op_id FROM pgferry.dashboard_ops
                   WHERE status = 'running' AND lease_until <= now()
                   ORDER BY lease_until LIMIT 1
                   FOR UPDATE SKIP LOCKED)
RETURNING o.op_id, o.tenant_id, o.action, o.filter
