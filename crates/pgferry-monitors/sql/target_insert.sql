INSERT INTO pgferry_mon.targets (tenant_id, name, url, events, enabled)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant_id, name) DO NOTHING
RETURNING name, url, events, enabled, created_at
