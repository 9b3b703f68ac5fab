-- One of the tenant's operations: $1 op, $2 tenant (another tenant's reads as missing).
SELECT op_id, action, filter, status, done, batches, error, created_at, updated_at, finished_at
  FROM pgferry.dashboard_ops
 WHERE op_id = $1::bigint AND tenant_id = $2::bigint
