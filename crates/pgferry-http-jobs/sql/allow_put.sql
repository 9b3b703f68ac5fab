INSERT INTO pgferry_http.allow_lists (tenant_id, ranges, cidrs) VALUES ($1, $2, $3)
ON CONFLICT (tenant_id) DO UPDATE SET ranges = EXCLUDED.ranges, cidrs = EXCLUDED.cidrs, updated_at = now()
RETURNING updated_at
