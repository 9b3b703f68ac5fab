-- Rotation: deletes the tenant's oldest secrets so that at most $2 remain (run before
-- adding the new one, in the same transaction).
DELETE FROM pgferry_http.signing_secrets
WHERE tenant_id = $1 AND id NOT IN (
    SELECT id FROM pgferry_http.signing_secrets WHERE tenant_id = $1 ORDER BY id DESC LIMIT $2)
RETURNING id
