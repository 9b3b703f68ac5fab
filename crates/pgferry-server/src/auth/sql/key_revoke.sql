-- $1 prefix. Revokes an active key; returns its key_id and tenant_id (no row: unknown or
-- already revoked).
UPDATE pgferry.api_keys SET revoked_at = now()
WHERE prefix = $1 AND revoked_at IS NULL
RETURNING key_id, tenant_id
