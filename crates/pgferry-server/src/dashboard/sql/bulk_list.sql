-- The tenant's newest operations: $1 tenant, $2 how many. Index dashboard_ops_tenant.
SELECT op_id, action, filter, status, done, batches, error, created_at, updated_at, finished_at
  FROM pgferry.dashboard_ops
 WHERE tenant_id = $1::bigint
 ORDER BY op_id DESC
 LIMIT $2::bigint
