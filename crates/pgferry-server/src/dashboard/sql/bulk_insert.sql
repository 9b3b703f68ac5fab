-- A new bulk operation, claimable at once. $1 tenant, $2 key, $3 action, $4 filter.
INSERT INTO pgferry.dashboard_ops (tenant_id, key_id, action, filter)
VALUES ($1::bigint, $2::bigint, $3::text, $4::jsonb)
RETURNING op_id
