-- Ends an operation this owner runs: $1 op, $2 owner, $3 status (done | failed), $4 error.
UPDATE pgferry.dashboard_ops
   SET status = $3::text, error = $4::text, finished_at = now(), updated_at = now()
 WHERE op_id = $1::bigint AND owner = $2::text AND status = 'running'
