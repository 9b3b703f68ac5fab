-- Stops one of the tenant's running operations after its current batch: $1 op, $2 tenant.
UPDATE pgferry.dashboard_ops
   SET status = 'cancelled', finished_at = now(), updated_at = now()
 WHERE op_id = $1::bigint AND tenant_id = $2::bigint AND status = 'running'
RETURNING op_id
