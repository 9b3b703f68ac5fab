-- A NULL argument keeps the current value.
UPDATE pgferry_mon.targets
SET url = coalesce($3, url), events = coalesce($4, events), enabled = coalesce($5, enabled)
WHERE tenant_id = $1 AND name = $2
RETURNING name, url, events, enabled, created_at
